"""jaxstop's internal layer: what several public modules share.

Nothing here is public API; the public modules (``gp``, ``regret``, ``confidence``,
``bos``, ``policies``, ``sim``) validate their arguments and call into it. Files:

* ``checks``: eager validation of arguments (raises naming the argument).
* ``numerics``: float64-accurate special functions (erfcx, Gaussian tails and hazards)
  and a stable argsort.
* ``linalg``: Cholesky, triangular and symmetric inverses with cheap gradients.
* ``gp_core``: the one masked GP: Matérn-5/2 kernel, Gram matrix, jittered factor,
  posterior, predictions, standardisation.
* ``gp_fit``: its log marginal likelihood with analytic gradient, the weak priors and
  the profiled BFGS fit (ML-II / MAP).
* ``regret_bound``: Eq. (8) of Makarova et al. on a posterior: beta, confidence bounds,
  EI / PI, LCB refinement.
* ``termination``: top set, standardisation, fit and bound of one study, CV threshold
  (used by :mod:`jaxstop.regret` and the auto-terminating BO policy).
* ``schedules``: BO-BOS's K1 and xi schedules (used by :mod:`jaxstop.bos` and the
  BO-BOS policy).
* ``batching``: ``vmap`` that maps per-study kernels in small groups on CPU.
* ``compile``: XLA compile options recommended around jaxstop (``jaxstop.compiler_options``).
* ``io``: exact save / load of pytrees (``jaxstop.save`` / ``jaxstop.load``).
"""
