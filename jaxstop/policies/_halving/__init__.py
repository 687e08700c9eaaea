"""The machinery of the successive-halving family (SH, Hyperband, BOHB, subsampling).

Private to :mod:`jaxstop.policies`; the public factories are in ``halving.py`` and
``subsampling.py``. One job per file:

* ``schedule``: brackets and rungs (``halving_schedule``) and the per-round table of sizes.
* ``params``: the numeric hyperparameters (``HalvingParams``), their defaults and checks.
* ``state``: the policy state (core fields plus the UQ, BOHB and profiling sub-states) and its info.
* ``engine``: the rung engine's step functions (start a bracket, record, keep, promote).
* ``batch``: the batch protocol (a round, or the profiling phase, asked and told at once).
* ``build``: the policy from a schedule (``halving_policy``).
* ``uncertainty``: the UQ part of SH+ / HB+ / BOHB+ / SS+ (windowed sigma, keep inputs).
* ``profiling``: the profiling phase of the UQ policies (``delta_estimate="profile"``).
* ``bohb_density``: BOHB's density-ratio proposals (good over bad kernel densities).
* ``slots``: ranking and sampling helpers over fixed-size slots.
"""
