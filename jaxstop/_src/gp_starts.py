"""Where a GP fit starts its restarts: random starts drawn around, or instead of, its start.

:func:`uniform_starts` are :func:`jaxstop.gp.fit`'s restarts (log-uniform in fixed ranges);
:func:`perturbed_starts` are AutoGluon 0.1's (the start plus N(0, 1) in the fit's
coordinates, clipped to its box), which the regret bound's fits use with ``num_starts``. Each
returns the starts with a leading axis, the given start first, for
:func:`jaxstop._src.optim.multistart`. The default start of each prior is
:data:`jaxstop._src.gp_priors.START`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxstop._src.gp_core import GPParams

__all__ = ["uniform_starts", "perturbed_starts"]


def uniform_starts(key, init: GPParams, num: int, d: int, dtype) -> GPParams:
    """``num`` starts: ``init`` first, then ``num - 1`` draws with log lengthscales uniform in
    ``[log 0.05, log 2]``, log amplitude in ``[log 0.3, log 3]``, log noise in
    ``[log 1e-4, log 0.3]``, ``init``'s mean and, where ``init`` has a warping, ``log a`` and
    ``log b`` uniform in ``[log 0.5, log 2]``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop._src import gp_core
        >>> s = uniform_starts(jax.random.key(0), gp_core.default_init(3, jnp.float32), 4, 3, jnp.float32)
        >>> s.log_lengthscales.shape, bool(jnp.all(s.mean == 0))
        ((4, 3), True)
    """
    if num <= 1:
        return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype)[None], init)
    k_ls, k_amp, k_noise = jax.random.split(key, 3)
    r = num - 1
    ls = jax.random.uniform(k_ls, (r, d), dtype, jnp.log(0.05), jnp.log(2.0))
    amp = jax.random.uniform(k_amp, (r,), dtype, jnp.log(0.3), jnp.log(3.0))
    noise = jax.random.uniform(k_noise, (r,), dtype, jnp.log(1e-4), jnp.log(0.3))
    extra = GPParams(amp, ls, noise, jnp.broadcast_to(jnp.asarray(init.mean, dtype), (r,)))
    if init.warped:
        w = jax.random.uniform(jax.random.fold_in(key, 3), (2, r, d), dtype, jnp.log(0.5), jnp.log(2.0))
        extra = extra._replace(log_warp_a=w[0], log_warp_b=w[1])
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([jnp.asarray(a, dtype)[None], b]), init, extra)


def perturbed_starts(key, init: GPParams, num: int, dim_mask, std: float = 1.0, joint: bool = False) -> GPParams:
    """``num`` starts of a fit with a leading axis: ``init`` first, then ``num - 1`` copies
    with independent N(0, ``std``^2) draws added to the log lengthscales of the real
    dimensions (``dim_mask``), the log noise and, with a warping, the real dimensions'
    ``log a`` and ``log b``, clipped to the fit's box (:func:`jaxstop._src.gp_fit.raw_box`; the log noise to its
    lower face above ``min_noise``). AutoGluon 0.1's restarts of its GP fit
    (``gpautograd/optimization_utils.py``: the initial values plus N(0, 1) in the
    optimiser's coordinates, clipped to the bounds; the first start is the initial values).
    The amplitude and the mean are not drawn: :func:`jaxstop._src.gp_fit.fit_profiled` profiles the amplitude
    out (and the mean with ``fit_mean``, or holds it); with ``joint`` (its joint fit, where
    they are coordinates like the others, as in AutoGluon) they are drawn too. Padded
    dimensions keep ``init``'s values, where the priors' gradients are 0.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop._src import gp_core
        >>> p = gp_core.default_init(2, jnp.float32)
        >>> s = perturbed_starts(jax.random.key(0), p, 4, jnp.array([True, False]))
        >>> s.log_lengthscales.shape, bool(jnp.all(s.log_lengthscales[:, 1] == p.log_lengthscales[1]))
        ((4, 2), True)
    """
    dt = init.log_noise.dtype
    r = num - 1
    from jaxstop._src.gp_fit import raw_box  # gp_fit imports this module

    lo, hi = raw_box(init)
    keys = jax.random.split(key, 4)

    def draw(k, a, real, lo_, hi_):
        a = jnp.asarray(a, dt)
        z = std * jax.random.normal(k, (r,) + a.shape, dt)
        real = jnp.broadcast_to(jnp.asarray(real), a.shape)[None]
        moved = jnp.clip(a[None] + jnp.where(real, z, 0), lo_[None], hi_[None])
        return jnp.concatenate([a[None], moved])

    def same(a):
        return None if a is None else jnp.broadcast_to(jnp.asarray(a, dt), (num,) + jnp.shape(a))

    if joint:
        k_amp, k_mean = jax.random.split(jax.random.fold_in(key, 4))
        amp = draw(k_amp, init.log_amplitude, True, lo.log_amplitude, hi.log_amplitude)
        mean = draw(k_mean, init.mean, True, lo.mean, hi.mean)
    else:
        amp, mean = same(init.log_amplitude), same(init.mean)
    out = GPParams(amp,
                   draw(keys[0], init.log_lengthscales, dim_mask, lo.log_lengthscales, hi.log_lengthscales),
                   draw(keys[1], init.log_noise, True, lo.log_noise, hi.log_noise), mean)
    if init.warped:
        out = out._replace(log_warp_a=draw(keys[2], init.log_warp_a, dim_mask, lo.log_warp_a, hi.log_warp_a),
                           log_warp_b=draw(keys[3], init.log_warp_b, dim_mask, lo.log_warp_b, hi.log_warp_b))
    return out
