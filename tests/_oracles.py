"""Independent references shared by the tests: one dense NumPy float64 GP and one
hand-written driver of the ask / report / tell protocol.

The GP is written from the textbook formulas, not from jaxstop: the Matérn-5/2 ARD
kernel, the dense posterior (Rasmussen & Williams Eq. 2.25-2.26, through a Cholesky
factor), the log marginal likelihood (through SciPy's multivariate normal), the
hyperparameter log prior and Eq. (8) of Makarova et al. (2022).

The driver plays a policy eagerly from Python, one call at a time, with NumPy table
lookups, and splits keys the way ``sim.run`` does, so a trace of ``sim.run`` can be
compared with it step by step.

The last section bounds how far two programs' floats can be apart (their rounding
reach) and checks that a discrete decision is decided by more than that, so that the
decisions of different programs can be compared exactly.
"""

import math
import typing

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
import scipy.stats

from jaxstop import policies

# ------------------------------------------------------------------ dense NumPy GP


def np_matern52(X1, X2, amp, ls):
    """Matérn-5/2 ARD kernel ``amp (1 + s + s^2 / 3) exp(-s)``, ``s = sqrt(5) r``, shape (n1, n2)."""
    A = X1[:, None, :] / ls - X2[None, :, :] / ls
    r = np.sqrt(np.sum(A * A, axis=-1))
    return amp * (1 + math.sqrt(5) * r + 5.0 / 3.0 * r * r) * np.exp(-math.sqrt(5) * r)


def np_posterior(X, y, amp, ls, noise, mean=0.0, jitter=0.0):
    """Dense float64 GP posterior of the latent function (R&W Eq. 2.25-2.26).

    The Gram matrix is ``K + (noise + jitter) I``. Returns ``predict(Xq) -> (mean, var)``
    with the variance clipped at 0.
    """
    K = np_matern52(X, X, amp, ls) + (noise + jitter) * np.eye(len(X))
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y - mean))

    def predict(Xq):
        Ks = np_matern52(Xq, X, amp, ls)
        v = np.linalg.solve(L, Ks.T)
        return mean + Ks @ alpha, np.maximum(amp - np.sum(v * v, axis=0), 0)

    return predict


def np_lml(X, y, amp, ls, noise, mean=0.0):
    """Log marginal likelihood ``log N(y; mean, K + noise I)``."""
    K = np_matern52(X, X, amp, ls) + noise * np.eye(len(X))
    return scipy.stats.multivariate_normal(np.full(len(y), mean), K).logpdf(y)


def np_log_prior(amp, ls, noise):
    """Log prior of the GP hyperparameters (up to a constant): on ``1 / ls^2``, ``amp`` and ``noise``."""
    lam = 1 / ls**2
    return -np.sum(0.1 / lam + 0.1 * lam) + np.log(amp) - amp + 0.1 * np.log(noise) - 30 * noise


def np_eq8(predict, X_eval, cand, beta):
    """Eq. (8): min over G_t of ucb minus min over candidates and G_t of lcb.

    ``predict(Xq) -> (mean, var)``. Returns ``(bound, ucb_min, lcb_min)``.
    """
    me, ve = predict(X_eval)
    mc, vc = predict(cand)
    sb = math.sqrt(beta)
    ucb_min = np.min(me + sb * np.sqrt(ve))
    lcb_min = min(np.min(mc - sb * np.sqrt(vc)), np.min(me - sb * np.sqrt(ve)))
    return ucb_min - lcb_min, ucb_min, lcb_min


# ------------------------------------------------------------------ normal densities for quadrature
# The normal pdf and log survival function from their formulas (scipy.special.log_ndtr is the
# function scipy.stats.norm.logsf evaluates), without scipy.stats' argument handling, which
# costs ~50 us per call: an adaptive quadrature of a 70-candidate integrand calls them ~10^5
# times.
_SQRT_2PI = math.sqrt(2 * math.pi)


def norm_pdf(x, mu, sigma):
    """The N(mu, sigma^2) density at ``x``."""
    z = (x - mu) / sigma
    return np.exp(-0.5 * z * z) / (_SQRT_2PI * sigma)


def norm_logpdf(x, mu, sigma):
    """The N(mu, sigma^2) log density at ``x``."""
    z = (x - mu) / sigma
    return -0.5 * z * z - math.log(_SQRT_2PI) - np.log(sigma)


def norm_logsf(x, mu, sigma):
    """log Pr(X > x) for X ~ N(mu, sigma^2), accurate far into the tail."""
    return scipy.special.log_ndtr((mu - x) / sigma)


# ------------------------------------------------------------------ protocol driver


def _np_tree(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def drive(policy, values, lengths, key, max_jobs, params=None, *, jit=False, keep_states=False):
    """Play ``policy`` on a table from Python, call by call (the protocol of ``sim.run``).

    Keys: ``k_init, k_loop = split(key)``, ``init(k_init)``, job ``j`` asked with
    ``split(k_loop, max_jobs)[j]``. A job of config ``c`` runs from
    ``start = min(job.start, end)`` to ``end = min(job.budget, lengths[c])``: with no
    ``report`` hook the result is the loss at ``end``; otherwise ``report`` is called
    once per epoch with that epoch's loss until it returns stop. The study ends after
    the first ``info.terminate`` or ``max_jobs`` jobs.

    Args:
        policy: A ``jaxstop.policies.Policy``.
        values: Losses, shape (num_configs, max_budget), NumPy.
        lengths: Curve lengths, shape (num_configs,).
        key: PRNG key.
        max_jobs: Most jobs played.
        params: Policy params (default ``policy.default_params()``).
        jit: Whether ask / report / tell are ``jax.jit``-compiled (else eager).
        keep_states: Whether to keep every state (``steps``).

    Returns:
        A dict: ``jobs``, ``results``, ``infos`` (NumPy pytrees, one per job),
        ``infos_stacked`` (stacked over jobs), ``configs``, ``epochs`` (ints), ``spent``
        (budget, ``epoch - start`` summed), ``incumbent`` (last info's), ``stop_job``
        (the terminating job, ``max_jobs`` if none), ``ask`` / ``report`` / ``tell`` (the
        functions called) and, with ``keep_states``, ``steps``: per job a dict of the
        states ``before`` (ask), ``asked``, ``reports`` (``(epoch, stop, state)`` per
        report), ``told`` (the state passed to tell) and ``after``.
    """
    values, lengths = np.asarray(values), np.asarray(lengths)
    params = policy.default_params() if params is None else params
    wrap = jax.jit if jit else (lambda f: f)
    ask, tell = wrap(policy.ask), wrap(policy.tell)
    report = None if policy.report is None else wrap(policy.report)
    k_init, k_loop = jax.random.split(key)
    state = policy.init(k_init, params)
    out = dict(jobs=[], results=[], infos=[], configs=[], epochs=[], spent=0, incumbent=-1, stop_job=max_jobs,
               steps=[], ask=ask, report=report, tell=tell)
    for j, k in enumerate(jax.random.split(k_loop, max_jobs)):
        before = state
        job, state = ask(k, state, params)
        asked = state
        c = int(job.config)
        end = min(int(job.budget), int(lengths[c]))
        start = min(int(job.start), end)
        epoch, value, stopped, reports = start, values[c, max(start - 1, 0)], False, []
        if report is None:
            epoch, value = end, values[c, end - 1]
        else:
            while epoch < end and not stopped:
                value = values[c, epoch]
                epoch += 1
                state, stop = report(state, job, jnp.asarray(epoch, jnp.int32), jnp.asarray(value), params)
                stopped = bool(stop)
                if keep_states:
                    reports.append((epoch, stopped, state))
        result = policies.Result(jnp.asarray(value), jnp.asarray(epoch, jnp.int32), jnp.asarray(stopped))
        told = state
        state, info = tell(state, job, result, params)
        if keep_states:
            out["steps"].append(dict(before=before, asked=asked, reports=reports, told=told, after=state))
        out["jobs"].append(_np_tree(job))
        out["results"].append(_np_tree(result))
        out["infos"].append(_np_tree(info))
        out["configs"].append(c)
        out["epochs"].append(epoch)
        out["spent"] += epoch - start
        out["incumbent"] = int(info.incumbent)
        if bool(info.terminate):
            out["stop_job"] = j
            break
    out["infos_stacked"] = jax.tree_util.tree_map(lambda *a: np.stack(a), *out["infos"])
    return out


# ------------------------------------------------------------------ rounding reach of decisions
# A test that plays one policy as several programs (a Python loop of jitted steps, lax.scan,
# vmap, a NumPy replay) compares their discrete decisions exactly. The programs sum in other
# orders and vector widths (which depend on the CPU), so their floats differ in the last bits;
# a decision is the same in all of them when its margin exceeds that reach. The helpers below
# give the reach of the quantities decisions are made on, for two float64 programs fed the
# same inputs, and check the margins, so that a test compares decisions exactly only where
# they are decided by more than rounding (and fails, naming the decision, where one is not).

U = np.finfo(np.float64).eps / 2  # unit roundoff


def with_states(policy):
    """``policy`` whose ``tell`` info also carries the state after the tell (field ``state``,
    after the info's own fields), so that ``sim.run``'s trace exposes every state."""
    cache = {}

    def tell(state, job, result, params=None):
        new, info = policy.tell(state, job, result, params)
        kind = type(info)
        if kind not in cache:
            cache[kind] = typing.NamedTuple(kind.__name__ + "WithState",
                                            [(f, typing.Any) for f in kind._fields] + [("state", typing.Any)])
        return new, cache[kind](*info, new)

    return policy._replace(tell=tell)


def mean_std_reach(x, ddof=0):
    """Reach of the mean and the standard deviation of ``x`` (exact inputs, n values) between
    two programs: ``(d_mean, std, d_std)``.

    Each program's mean is within ``n u max|x|`` of the exact one; its two-pass sum of squared
    deviations carries (n + 3) u relative error, the division and the square root 2 u more,
    so the std is within ``(n + 6) u / 2`` of exact relatively, and the mean's error adds
    ``n d_mean^2`` to the sum of squares (its first-order effect vanishes at the mean), which
    moves the std by at most ``min(sqrt(n / (n - ddof)) d_mean, n d_mean^2 / (2 (n - ddof) std))``.
    Two programs: twice each.
    """
    x = np.asarray(x, float)
    n = len(x)
    d_mean = n * U * np.max(np.abs(x))
    std = float(np.std(x, ddof=ddof))
    shift = math.sqrt(n / (n - ddof)) * d_mean
    if std > 0:
        shift = min(shift, n * d_mean**2 / (2 * (n - ddof) * std))
    return 2 * d_mean, std, 2 * ((n + 6) * U / 2 * std + shift)


def standardize_reach(y):
    """Reach of ``z = (y - mean(y)) / std(y)`` (``jaxstop.gp.standardize``) between two
    programs, per row, and the relative reach of the std: from :func:`mean_std_reach`, plus
    the subtraction and division (2 u relative per program)."""
    y = np.asarray(y, float)
    d_mean, std, d_std = mean_std_reach(y)
    if len(y) < 2 or std == 0:
        return np.zeros(len(y)), 0.0
    z = (y - y.mean()) / std
    return d_mean / std + np.abs(z) * (d_std / std) + 4 * U * np.abs(z), d_std / std


def posterior_reach(X, y, Xq, amp, ls, noise, mean=0.0, dy=0.0):
    """Pointwise reach ``(d_mean, d_sd)`` of the latent GP posterior (Matern-5/2, the GP of
    :func:`np_posterior`) at ``Xq`` between two programs with the same hyperparameters.

    As in tests/test_regret.py's bound_rounding: each program factorises ``K + E`` with
    ``||E|| <= c n eps ||K||`` (Cholesky backward stability, c = 4), which moves
    ``alpha = K^-1 (y - mean)`` by ``r ||alpha||``, ``r = c n kappa(K) eps``, a mean by
    ``r ||k|| ||alpha||`` and a variance by ``r amp``, its square root by
    ``min(sqrt(r amp), r amp / (2 sd))``; the dot product ``k . alpha`` adds
    ``(n + 2) u sum |k_i alpha_i|``. Data that the programs round differently (``dy``, per
    row, e.g. :func:`standardize_reach`: already a difference between programs) move the
    mean by ``||k|| ||K^-1|| ||dy||``. Two programs: twice the rest.
    """
    X, y, Xq = (np.asarray(a, float) for a in (X, y, Xq))
    K = np_matern52(X, X, amp, ls) + noise * np.eye(len(X))
    n = len(X)
    eig = np.linalg.eigvalsh(K)
    r = 2 * 4 * n * (eig[-1] / eig[0]) * np.finfo(float).eps
    alpha = np.linalg.solve(K, y - mean)
    k = np_matern52(Xq, X, amp, ls)
    kn = np.linalg.norm(k, axis=1)
    _, var = np_posterior(X, y, amp, ls, noise, mean)(Xq)
    d_mean = (r * kn * np.linalg.norm(alpha) + 2 * (n + 2) * U * np.abs(k * alpha).sum(axis=1)
              + kn * np.linalg.norm(np.broadcast_to(dy, (n,))) / eig[0])
    d_var = r * amp + 4 * U * amp
    d_sd = np.minimum(np.sqrt(d_var), d_var / (2 * np.sqrt(var) + 1e-300))
    return d_mean, d_sd


def _intervals(values, reach, headroom):
    """Per candidate the interval holding every program's value: each program's value
    widened by its reach, and by ``headroom`` times the spread between the programs."""
    v, r = np.atleast_2d(np.asarray(values, float)), np.atleast_2d(np.asarray(reach, float))
    with np.errstate(invalid="ignore"):
        spread = np.where(np.all(np.isfinite(v), axis=0), v.max(0) - v.min(0), 0.0)
    lo = np.min(v - r, axis=0) - headroom * spread
    hi = np.max(v + r, axis=0) + headroom * spread
    return lo, hi


# The programs' model fits (GP hyperparameters fitted warm-started, step after step) carry
# their rounding differences forward and amplify them; the values they then compute differ
# by more than one step's rounding, by an amount measured here from each program's own
# state (the spread between the programs). The margin must exceed HEADROOM times that
# spread: room for a CPU on which the fits amplify their rounding a hundred times more.
HEADROOM = 100.0


def assert_pick_robust(values, reach, pick, what, headroom=HEADROOM):
    """The candidate every program picks (``pick`` "min" or "max" of ``values``: shape
    (programs, candidates) or (candidates,), excluded candidates at +-inf) is decided by
    more than rounding: its interval (:func:`_intervals`) lies strictly beyond every other
    finite candidate's. Returns its index."""
    v = np.atleast_2d(np.asarray(values, float))
    lo, hi = _intervals(v, reach, headroom)
    best = int(np.argmin(v[0]) if pick == "min" else np.argmax(v[0]))
    others = np.isfinite(v[0]) & (np.arange(v.shape[1]) != best)
    ok = hi[best] < lo[others] if pick == "min" else lo[best] > hi[others]
    assert np.all(ok), f"{what}: candidate {best} is not ahead of {np.flatnonzero(others)[~ok]} by more than rounding"
    return best


def assert_side_robust(margin, reach, what, headroom=HEADROOM):
    """``margin`` (a value minus its threshold, per program) is of one sign in every program
    beyond rounding: its interval (:func:`_intervals`, ``reach`` covering the value and the
    threshold) excludes 0. Returns whether it is negative."""
    m = np.reshape(np.asarray(margin, float), (-1, 1))
    lo, hi = _intervals(m, np.reshape(np.broadcast_to(reach, m.shape[:1]), (-1, 1)), headroom)
    assert hi[0] < 0 or lo[0] > 0, f"{what}: margin {m[0, 0]:.3e} within rounding ({max(-lo[0], hi[0]):.3e})"
    return bool(hi[0] < 0)
