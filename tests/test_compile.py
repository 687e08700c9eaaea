"""The compile options recommended for programs that call jaxstop (jaxstop._compile)."""

import jax
import jax.numpy as jnp
import numpy as np

import jaxstop
from jaxstop.confidence import confidence_curve, keep_count


def test_compiler_options_per_backend():
    assert jaxstop.compiler_options("cpu") == {"xla_cpu_prefer_vector_width": 512}
    assert jaxstop.compiler_options("gpu") == {}
    opts = jaxstop.compiler_options("cpu")
    opts["xla_cpu_prefer_vector_width"] = 256  # a copy: the module's options are unchanged
    assert jaxstop.compiler_options("cpu")["xla_cpu_prefer_vector_width"] == 512


def test_programs_with_and_without_options_agree(rng):
    """Compiled with the options and with XLA's defaults, the curves differ only by rounding
    and the ranking not at all."""
    mu = jnp.asarray(rng.uniform(0.1, 0.11, 100))
    sigma = jnp.asarray(10 ** rng.uniform(-3, -1, 100))
    plain = jax.jit(confidence_curve)(mu, sigma)
    tuned = jax.jit(confidence_curve, compiler_options=jaxstop.compiler_options())(mu, sigma)
    np.testing.assert_array_equal(plain.order, tuned.order)
    np.testing.assert_allclose(plain.curve, tuned.curve, rtol=0, atol=1e-14)
    f = jax.jit(lambda m, s: keep_count(m, s, 0.5 * s, 4.0).k, compiler_options=jaxstop.compiler_options())
    assert int(f(mu, sigma)) == int(jax.jit(lambda m, s: keep_count(m, s, 0.5 * s, 4.0).k)(mu, sigma))
