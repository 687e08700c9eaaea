"""jaxstop: JAX-accelerated, batched Bayesian stopping for hyperparameter optimisation.

Modules:
    gp: GP surrogate (masked posterior, ML-II fit), batched by ``vmap``.
    confidence: Gaussian-max integrals for UQ-guided halving (prob. of best, keep rule).
    bos: Bayesian optimal stopping (learning-curve GP, Monte Carlo backward induction).
    regret: automatic termination from GP regret bounds, baselines, trace replay.
    policies: the functional ask/tell facade and the policies built on it.
    sim: simulation studies against tables of real learning curves.
    data: a small embedded sample of real HPO data for demos.

``compiler_options()`` gives the XLA options recommended around jaxstop (512-bit vectors on
CPU); jaxstop does not apply them itself: pass them to your own top-level ``jax.jit``.
"""

from importlib import metadata as _metadata

from jaxstop import bos as bos
from jaxstop import confidence as confidence
from jaxstop import data as data
from jaxstop import gp as gp
from jaxstop import policies as policies
from jaxstop import regret as regret
from jaxstop import sim as sim
from jaxstop._src.compile import compiler_options as compiler_options
from jaxstop._src.io import load as load
from jaxstop._src.io import save as save
from jaxstop._src.status import Reason as Reason


# The version has one source, pyproject.toml; the installed distribution's metadata carries it.
try:
    __version__ = _metadata.version("jaxstop")
except _metadata.PackageNotFoundError:   # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["bos", "confidence", "data", "gp", "policies", "regret", "sim", "save", "load", "compiler_options", "Reason", "__version__"]
