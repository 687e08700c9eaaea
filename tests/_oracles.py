"""Independent references shared by the tests: one dense NumPy float64 GP and one
hand-written driver of the ask / report / tell protocol.

The GP is written from the textbook formulas, not from jaxstop: the Matérn-5/2 ARD
kernel, the dense posterior (Rasmussen & Williams Eq. 2.25-2.26, through a Cholesky
factor), the log marginal likelihood (through SciPy's multivariate normal), the
hyperparameter log prior and Eq. (8) of Makarova et al. (2022).

The driver plays a policy eagerly from Python, one call at a time, with NumPy table
lookups, and splits keys the way ``sim.run`` does, so a trace of ``sim.run`` can be
compared with it step by step.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
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
