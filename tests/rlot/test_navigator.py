"""The navigator: parameter count, dueling combination, input scaling."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasoner.agents.rlot.navigator import Navigator, num_params
from tests.tolerances import formula_atol, network_atol


def test_navigator_has_2566_parameters():
    # 7*32+32 + (32*32+32 + 32*1+1) + (32*32+32 + 32*5+5)
    assert num_params(Navigator(rngs=nnx.Rngs(0))) == 2566


def abs_network(net, obs):
    """The navigator run on |weights|, |biases| and |scaled inputs| (`network_atol`'s S): V, A and the dueling
    combination's terms V + A + mean A, each the sum of the magnitudes of everything that reaches it."""
    def lin(layer, x):
        return x @ np.abs(np.asarray(layer.kernel[...], np.float64)) + np.abs(np.asarray(layer.bias[...], np.float64))

    h = lin(net.trunk, np.abs((obs - 1.5) / 1.5))
    v = lin(net.value_out, lin(net.value_hidden, h))
    a = lin(net.adv_out, lin(net.adv_hidden, h))
    return v, a, v + a + a.mean(-1, keepdims=True)


# Reductions on the path to a Q-value: the input scaling (2 roundings), trunk (7 inputs + bias), hidden (32 + 1),
# output (32 + 1), then the dueling combination (a mean of 5, its division, one add, one subtract).
NAVIGATOR_DEPTH = 2 + 8 + 33 + 33 + 5 + 3


def test_q_is_value_plus_centred_advantage():
    net = Navigator(rngs=nnx.Rngs(1))
    obs = np.random.default_rng(0).integers(0, 4, size=(9, 7)).astype(np.float32)
    q = np.asarray(net(obs))
    v, a = (np.asarray(t) for t in net.streams(obs))
    assert q.shape == (9, 5) and q.dtype == np.float32
    expected = v.astype(np.float64) + a - a.astype(np.float64).mean(axis=-1, keepdims=True)
    # `net(obs)` and `net.streams(obs)` are two evaluations of the same network: each output within the chain's
    # bound of exact (S from `abs_network`)
    s_v, _, s_q = abs_network(net, obs)
    tol_q, tol_v = network_atol(s_q, depth=NAVIGATOR_DEPTH), network_atol(s_v, depth=NAVIGATOR_DEPTH)
    assert (np.abs(q - expected) <= tol_q).all(), np.abs(q - expected).max()
    # the mean of Q over actions is V exactly; here Q's error (at most its largest), V's, and the float32 mean of 5
    mean_tol = tol_q.max(-1, keepdims=True) + tol_v + formula_atol(np.abs(q).mean(-1, keepdims=True), ops=1, terms=5)
    assert (np.abs(q.mean(axis=-1, keepdims=True) - v) <= mean_tol).all()


def test_forward_matches_numpy_with_scaled_input():
    net = Navigator(rngs=nnx.Rngs(2))
    obs = np.random.default_rng(3).integers(0, 4, size=(6, 7)).astype(np.float32)

    def lin(layer, x):
        return x @ np.asarray(layer.kernel[...], np.float64) + np.asarray(layer.bias[...], np.float64)

    relu = lambda x: np.maximum(x, 0)  # noqa: E731
    h = relu(lin(net.trunk, (obs.astype(np.float64) - 1.5) / 1.5))  # scores 0..3 -> [-1, 1]
    v = lin(net.value_out, relu(lin(net.value_hidden, h)))
    a = lin(net.adv_out, relu(lin(net.adv_hidden, h)))
    expected = v + a - a.mean(-1, keepdims=True)
    # float32 (ours) against float64 (exact up to 1e-16): the float32 chain's error bound
    tol = network_atol(abs_network(net, obs)[2], depth=NAVIGATOR_DEPTH)
    got = np.asarray(net(jnp.asarray(obs)), np.float64)
    assert (np.abs(got - expected) <= tol).all(), (np.abs(got - expected).max(), tol.min())
    # the comparison has power: the unscaled input (a plausible slip) misses by far more than the bound
    h_raw = relu(lin(net.trunk, obs.astype(np.float64)))
    a_raw = lin(net.adv_out, relu(lin(net.adv_hidden, h_raw)))
    raw = lin(net.value_out, relu(lin(net.value_hidden, h_raw))) + a_raw - a_raw.mean(-1, keepdims=True)
    assert np.abs(got - raw).max() > 1e3 * tol.max()
