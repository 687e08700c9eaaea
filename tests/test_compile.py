"""The compile options recommended for programs that call jaxstop (jaxstop._src.compile)."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate

import jaxstop
from _oracles import norm_logsf, norm_pdf
from jaxstop.confidence import confidence_curve


def test_compiler_options_per_backend():
    assert jaxstop.compiler_options("cpu") == {"xla_cpu_prefer_vector_width": 512}
    assert jaxstop.compiler_options("gpu") == {}
    opts = jaxstop.compiler_options("cpu")
    opts["xla_cpu_prefer_vector_width"] = 256  # a copy: the module's options are unchanged
    assert jaxstop.compiler_options("cpu")["xla_cpu_prefer_vector_width"] == 512


def test_curve_compiled_with_options_matches_quad():
    """Compiled with the options (and with XLA's defaults) the curve matches the defining
    integral by scipy quad, and the ranking is NumPy's stable argsort."""
    mu = np.array([0.3, 0.1, 0.12, 0.1, 0.5, 0.11])
    sigma = np.array([0.05, 0.02, 0.1, 0.001, 0.3, 0.04])
    p = np.empty(6)
    for i in range(6):
        others = np.arange(6) != i

        def f(x, i=i, others=others):
            return norm_pdf(x, mu[i], sigma[i]) * np.exp(np.sum(norm_logsf(x, mu[others], sigma[others])))

        lo, hi = mu[i] - 12 * sigma[i], mu[i] + 12 * sigma[i]
        pts = sorted({m + k * s for m, s in zip(mu, sigma) for k in (-3, 0, 3) if lo < m + k * s < hi})
        p[i] = integrate.quad(f, lo, hi, points=pts, limit=500, epsabs=1e-13)[0]
    order = np.argsort(mu, kind="stable")
    oracle = np.cumsum(p[order])
    for opts in (jaxstop.compiler_options(), None):
        res = jax.jit(confidence_curve, compiler_options=opts)(jnp.asarray(mu), jnp.asarray(sigma))
        np.testing.assert_array_equal(np.asarray(res.order), order)
        np.testing.assert_allclose(np.asarray(res.curve), oracle, rtol=0, atol=1e-9)
