"""The one entry of every integral of :mod:`jaxstop.confidence`: a problem made inert on its
padded rows, shifted and scaled to standard units, and what that says about its status.

Every probability here is invariant under a common affine map ``x -> (x - c) / s`` of all
candidates (``mu -> (mu - c) / s``, ``sigma -> sigma / s``). :func:`standardise` takes
``c`` = the smallest valid ``mu`` and ``s`` = the power of two just above the largest valid
``sigma`` (so the scaling itself is exact), so the kernels see means ``>= 0`` (the leader at
exactly 0) and spreads in ``(0, 1)`` (below 4 at the ends of the dtype's range): the
integration window, within 9 of 0, is then representable whatever the units of the input
(``mu = 1e6`` with ``sigma = 1e-3``, or ``sigma = 3e38``, whose ``mu +- 9 sigma``
overflows float32).

What the map cannot repair is reported (:func:`problem_status`, ``KeepCount.reason``):

* ``UNREPRESENTABLE`` when the input cannot carry the problem: the float spacing of a
  relevant candidate's ``mu`` (at most ``eps |mu|``) exceeds ``2^-10`` of its spread against
  the others, ``hypot(sigma_j, sigma_l)`` with ``l`` the narrowest other relevant candidate --
  its mean is then known to fewer than 10 bits at the scale it is compared on, and means closer
  than the spacing have already been merged by the rounding of the input (``mu = 1e6`` and
  ``1e6 + 0.003`` are one float32) -- or a valid ``sigma`` is below the dtype's range
  relative to the largest one (``sigma / s`` underflows), or a derived spread (the shrunk
  ``sigma`` of :func:`~jaxstop.confidence.zeta`) overflowed. "Relevant" is every candidate
  that can enter an integral: ``mu_j - 9 sigma_j`` below the leader's ``mu + 9 sigma``.
  Shifting one ``X_j`` by half a spacing ``d`` moves a probability of the candidates' order
  only through the differences ``X_j - X_l``, by at most ``d / (sqrt(2 pi) hypot(sigma_j,
  sigma_l))`` each, so below the limit the rounding of the input moves no probability by
  more than ``2^-11 / sqrt(2 pi) ~ 2e-4`` per pair of relevant candidates. A lone relevant
  candidate (probability 1, the others at most ``2 Phi(-9)``) is exact whatever its rounding:
  float32 ``mu = 1e6`` with ``sigma = 1e-3`` alone is represented. The leader values of
  :func:`~jaxstop.confidence.zeta` (``P_1`` of the leader) depend on the pairs with the
  leader only, and are judged on those: members shrunk far below their spacing that never
  meet do not make its problem unrepresentable.
* Candidates with an infinite standardised mean (``mu - c`` overflowed) lie beyond every
  window: they get probability 0, which is exact, and are not an error.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxstop._src import checks, numerics
from jaxstop._src.status import Reason, first_reason

# Half-width of every integration window in standard deviations (see _quadrature._C).
C = 9.0
# Largest float spacing of a relevant mu, in units of its spread against the other relevant
# candidates, that still counts as represented.
RESOLUTION = 2.0**-10


class Standardised(NamedTuple):
    """A problem in standard units (see the module docstring).

    Attributes:
        mu: ``(mu - c) / s`` on valid rows (``>= 0``, possibly ``+inf``), 0 elsewhere, shape (n,).
        sigma: ``sigma / s`` on valid rows (in ``[tiny, 4)``), 1 elsewhere, shape (n,).
        valid: Rows that enter the integrals, shape (n,), bool.
        unrepresentable: Whether the problem could not be represented (module docstring), bool.
        suspect: The valid rows that make it so (a mean too coarse for its spread, a spread
            that underflowed), shape (n,), bool.
        lost: Whether a row marked valid left the problem (a derived spread that
            overflowed), bool.
    """

    mu: jax.Array
    sigma: jax.Array
    valid: jax.Array
    unrepresentable: jax.Array
    suspect: jax.Array
    lost: jax.Array


def standardise(mu, sigma, valid, leader: bool = False) -> Standardised:
    """``(mu, sigma)`` on the rows ``valid`` marks, in standard units; the other rows inert.

    A row marked valid whose ``mu`` or ``sigma`` is not finite and positive (a derived
    spread that overflowed) leaves the problem and makes it unrepresentable. With ``leader``
    (candidates sorted by ``mu``, the leader in row 0: ``P_1`` of the leader among the top
    ``k``, which depends on the pairs with the leader only) a mean's spacing counts against
    its spread with the leader; else against the narrowest other relevant candidate. The centre
    and scale carry no derivative (``stop_gradient``): the probabilities do not depend on
    them, so derivatives through the map are exact without them.
    """
    dtype = mu.dtype
    tiny = jnp.finfo(dtype).tiny
    eps = jnp.finfo(dtype).eps
    ok_row = jnp.isfinite(mu) & jnp.isfinite(sigma) & (sigma > 0)
    lost = valid & ~ok_row
    valid = valid & ok_row
    mu = checks.inert_rows(mu, valid, 0.0)
    sigma = checks.inert_rows(sigma, valid, 1.0)
    # centre and scale (inf and 0 when nothing is valid: then 0 and 1)
    centre = jnp.min(jnp.where(valid, mu, jnp.inf))
    scale = jnp.max(jnp.where(valid, sigma, 0.0))
    centre = lax.stop_gradient(jnp.where(centre < jnp.inf, centre, 0.0))
    inv = lax.stop_gradient(numerics.inverse_power_of_two(jnp.where(scale > 0, scale, 1.0)))
    m = jnp.where(valid, (mu - centre) * inv, 0.0)
    s = sigma * inv
    underflow = valid & ~(s >= tiny)
    s = jnp.where(valid, jnp.maximum(s, tiny), 1.0)
    # the window of every integral: within C sigma of the leader (mean 0, the widest such)
    s_lead = jnp.max(jnp.where(valid & (m == 0), s, 0.0))
    near = valid & (m - C * s < C * s_lead)
    # a rounded mean matters against the other candidates it competes with: the spread of
    # X_j - X_l, at least that of the narrowest other near candidate l (inf: none, and a lone
    # near candidate's probabilities, 1 and ~0, do not depend on its rounding)
    s_near = jnp.where(near, sigma, jnp.inf)
    first = jnp.argmin(s_near)
    second = jnp.min(s_near.at[first].set(jnp.inf))
    row = jnp.arange(mu.shape[0])
    partner = jnp.where(row == first, second, s_near[first])
    if leader:
        partner = jnp.where(row == 0, partner, sigma[0])
    spread = lax.stop_gradient(jnp.hypot(sigma, partner))
    coarse = near & (eps * jnp.abs(mu) > RESOLUTION * spread)
    suspect = underflow | coarse
    unrep = jnp.any(lost | suspect)
    return Standardised(m.astype(dtype), s.astype(dtype), valid, unrep, suspect, jnp.any(lost))


class ProblemStatus(NamedTuple):
    """Status of a problem of :mod:`jaxstop.confidence` (see :func:`problem_status`).

    Attributes:
        ok: Whether the problem is computed as given: no invalid value on a row the mask
            selects, at least one valid candidate, representable in its dtype; bool scalar.
        reason: Why not, an int32 code of :class:`jaxstop._src.status.Reason`: ``BAD_INPUT``
            (an entry selected by the mask was NaN / inf, or ``sigma <= 0``), ``EMPTY`` (no
            valid candidate), ``UNREPRESENTABLE`` (see the package docstring); ``OK`` (0)
            otherwise.
        num_valid: Candidates that enter the computation, int32 scalar.
        num_invalid: Candidates the mask selects that were left out as invalid, int32 scalar.
    """

    ok: jax.Array
    reason: jax.Array
    num_valid: jax.Array
    num_invalid: jax.Array


def status_of(mask, valid, unrepresentable) -> ProblemStatus:
    """The :class:`ProblemStatus` of a problem whose selected rows are ``mask``, valid
    rows ``valid`` and representability from :func:`standardise`."""
    num_valid = jnp.sum(valid).astype(jnp.int32)
    num_invalid = jnp.sum(mask & ~valid).astype(jnp.int32)
    reason = first_reason(
        (num_invalid > 0, Reason.BAD_INPUT),
        (num_valid == 0, Reason.EMPTY),
        (unrepresentable, Reason.UNREPRESENTABLE),
    )
    return ProblemStatus(reason == int(Reason.OK), reason, num_valid, num_invalid)
