"""jaxstop's internal layer: what several public modules share.

Nothing here is public API; the public modules (``gp``, ``regret``, ``confidence``,
``bos``, ``policies``, ``sim``) validate their arguments and call into it. Files:

* ``checks``: eager validation of arguments (raises naming the argument), the supported
  dtypes, and ``inert_rows`` (padded rows replaced before any arithmetic).
* ``status``: the status convention of results (``ok`` and the ``Reason`` codes).
* ``numerics``: float64-accurate special functions (erfcx, Gaussian tails and hazards),
  stable ranks and argsort, and the rescaled masked std (the window sigma).
* ``linalg``: Cholesky, triangular and symmetric inverses with cheap gradients.
* ``gp_likelihood``: the kernel-agnostic masked GP: Gram conditioning, jittered factor,
  log marginal likelihood and its gradient from the Gram matrix's derivatives, posterior
  moments from a factor (used by the Matérn GP and by the learning-curve GP of ``bos``).
* ``gp_core``: the Matérn-5/2 GP on it: kernel, Gram matrix, posterior, predictions,
  standardisation.
* ``gp_fit``: the Matérn GP's likelihood with analytic gradient and its BFGS fit
  (profiled or joint; ML-II / MAP).
* ``gp_priors``: the hyperparameter priors of that fit (Optuna's or AutoGluon's).
* ``gp_starts``: the random restarts of that fit.
* ``warping``: Kumaraswamy input warping (the GP's optional warp parameters).
* ``optim``: the multistart loop of both GP fits and the curve GP's projected Adam.
* ``regret_bound``: Eq. (8) of Makarova et al. on a posterior: beta, confidence bounds,
  EI / PI, LCB refinement.
* ``termination``: top set, standardisation, fit and bound of one study, CV threshold
  (used by :mod:`jaxstop.regret` and the auto-terminating BO policy).
* ``schedules``: BO-BOS's K1 and xi schedules (used by :mod:`jaxstop.bos` and the
  BO-BOS policy).
* ``batching``: ``vmap`` that maps per-study kernels in small groups on CPU; ``gated_cond``,
  ``any_in_batch`` and ``map_in_blocks`` (branches, loop conditions and blocks over studies).
* ``compile``: XLA compile options recommended around jaxstop (``jaxstop.compiler_options``).
* ``io``: exact save / load of pytrees (``jaxstop.save`` / ``jaxstop.load``).
"""
