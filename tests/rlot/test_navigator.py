"""The navigator: parameter count, dueling combination, input scaling."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasoner.agents.rlot.navigator import Navigator, num_params


def test_navigator_has_2566_parameters():
    # 7*32+32 + (32*32+32 + 32*1+1) + (32*32+32 + 32*5+5)
    assert num_params(Navigator(rngs=nnx.Rngs(0))) == 2566


def test_q_is_value_plus_centred_advantage():
    net = Navigator(rngs=nnx.Rngs(1))
    obs = np.random.default_rng(0).integers(0, 4, size=(9, 7)).astype(np.float32)
    q = np.asarray(net(obs))
    v, a = (np.asarray(t) for t in net.streams(obs))
    assert q.shape == (9, 5) and q.dtype == np.float32
    expected = v + a - a.mean(axis=-1, keepdims=True)
    # a handful of f32 roundings of terms of size |v| + |a|
    tol = 8 * np.finfo(np.float32).eps * (np.abs(v) + np.abs(a)).max()
    np.testing.assert_allclose(q, expected, atol=tol, rtol=0)
    # the mean of Q over actions is V exactly up to rounding
    np.testing.assert_allclose(q.mean(axis=-1, keepdims=True), v, atol=tol, rtol=0)


def test_forward_matches_numpy_with_scaled_input():
    net = Navigator(rngs=nnx.Rngs(2))
    obs = np.random.default_rng(3).integers(0, 4, size=(6, 7)).astype(np.float32)

    def lin(layer, x):
        return x @ np.asarray(layer.kernel[...]) + np.asarray(layer.bias[...])

    relu = lambda x: np.maximum(x, 0)  # noqa: E731
    h = relu(lin(net.trunk, (obs - 1.5) / 1.5))  # scores 0..3 -> [-1, 1]
    v = lin(net.value_out, relu(lin(net.value_hidden, h)))
    a = lin(net.adv_out, relu(lin(net.adv_hidden, h)))
    expected = v + a - a.mean(-1, keepdims=True)
    # three matmuls of width <= 32 in f32: error ~ 32 * eps * the magnitude of the products
    tol = 3 * 32 * np.finfo(np.float32).eps * max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(np.asarray(net(jnp.asarray(obs))), expected, atol=tol, rtol=0)
