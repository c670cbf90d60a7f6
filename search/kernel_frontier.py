"""Frontier-synchronous A* for the kernel: many pops per loop iteration, still exactly the host's order.

Why: the one-pop loop of `search.kernel.astar_core` runs as many iterations as the slowest problem of the batch has
pops (Dijkstra on DeepRD: up to ~150), and on CPU every iteration costs about the same whatever it does. Here an
iteration pops a FRONTIER: the live items with the minimal (f, h) key, in the host's LIFO order (highest push stamp
first), at most `width` of them (a prefix of the host's pop order is always safe to take), and computes their
expansions at once on [B, F, D] tensors (F frontier rows, D out-edges each), never on all M hyperedges:

* a hyperedge is an event of the row of its last-popped premise (premises already in the chart count -1); events
  are visited in (row, hyperedge id) order, which is the host's order (pop order, then ascending id);
* an event of head c pushes iff c is not in the chart at that moment (not before, and not a frontier item popped at
  or before the row) and g < w[c] as the host's sequential loop has it: within one row a prefix minimum over the
  row's earlier events of c (D x D); across rows only c's first row can push unless a later row has a smaller g, and
  then the frontier is cut before that row (decided next iteration with the updated w[c]);
* exactness guard: a push whose key (f', h') <= (f_min, h_min) would pop before the rest of the frontier (lower
  key, or an equal key with a newer stamp, LIFO): the frontier is cut after the first row that makes one. With
  h = 0 this never happens (g > w of the popped premise), so Dijkstra takes one iteration per distinct weight (or
  per `width` items). Popping the goal ends the frontier there (popped, not expanded), as the host returns.

Pushes get stamps counter + rank in this order, so the LIFO ties of later iterations match the host. The agenda is
decrease-key (see search.kernel_queue): a head pushed twice in one row keeps its last, cheapest entry.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from search.kernel_heuristics import axiom_weight

__all__ = ["astar_frontier"]

_INF = jnp.inf


def _row_base(b: int, length: int, ndim: int):
    return (jnp.arange(b, dtype=jnp.int32) * length).reshape((b,) + (1,) * (ndim - 1))


def take_rows(x_BxL, idx):
    """Per-row gather x[b, idx[b, ...]] with idx clipped (callers mask invalid ones), as ONE flat gather with
    scalar indices (cheaper on CPU than take_along_axis, which builds (row, col) index pairs)."""
    b, length = x_BxL.shape
    flat = _row_base(b, length, idx.ndim) + jnp.clip(idx, 0, length - 1)
    return x_BxL.reshape(-1).at[flat].get(mode="promise_in_bounds")


def _put(x_BxL, idx, vals, mask, op: str = "set"):
    """Per-row scatter x[b, idx[b, ...]] <op>= vals where mask, as one flat scatter (masked entries dropped)."""
    b, length = x_BxL.shape
    flat = jnp.where(mask, _row_base(b, length, idx.ndim) + idx, b * length)
    ref = x_BxL.reshape(-1).at[flat]
    out = {"set": ref.set, "min": ref.min, "max": ref.max}[op](vals, mode="drop")
    return out.reshape(b, length)


def initial_agenda(axiom_order_BxN, h_BxN, *, cost: str):
    """The agenda before the first pop: every axiom pushed with weight a0 (cost "max": 0, "sum": 1), f = a0 + h,
    push stamps in axiom order. axiom_order_BxN: atom ids of the axioms, -1 padded.
    Returns (w_BxN, f_BxN, stamp_BxN, live_BxN, axiom_valid_BxN)."""
    b, n = h_BxN.shape
    rows = jnp.arange(b)[:, None]
    a0 = axiom_weight(cost)
    ax_ok = axiom_order_BxN >= 0
    ax_col = jnp.where(ax_ok, axiom_order_BxN, n)
    w = jnp.full((b, n), _INF, jnp.float32).at[rows, ax_col].set(a0, mode="drop")
    f = jnp.full((b, n), _INF, jnp.float32).at[rows, ax_col].set(a0 + take_rows(h_BxN, axiom_order_BxN), mode="drop")
    stamp = jnp.full((b, n), -1, jnp.int32).at[rows, ax_col].set(
        jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (b, n)), mode="drop")
    live = jnp.zeros((b, n), bool).at[rows, ax_col].set(True, mode="drop")
    return w, f, stamp, live, ax_ok


def astar_frontier(axiom_order_BxN, premises_BxMxK, head_BxM, out_edges_BxNxD, goal_B, h_BxN, *, cost: str,
                   width: int = 16):
    """A* on a padded batch, one frontier (up to `width` items of the minimal (f, h) key, cut for exactness) per
    unfinished problem per loop step. Returns (weight_B, trace_BxM, pushes_B, popped_BxN, popped_f_BxN, pops_B),
    the same as `search.kernel.astar_core`."""
    b, n, d = out_edges_BxNxD.shape
    m, k = premises_BxMxK.shape[1:]
    fw = max(1, min(int(width), n))
    rows = jnp.arange(b)[:, None]
    rows3 = rows[:, :, None]
    big = jnp.int32(n)  # "not in the frontier window": positions are 0..fw-1
    w, f, stamp, live, ax_ok = initial_agenda(axiom_order_BxN, h_BxN, cost=cost)
    iota_f = jnp.arange(fw, dtype=jnp.int32)
    out_edges_flat = out_edges_BxNxD.reshape(b, n * d)
    premises_flat = premises_BxMxK.reshape(b, m * k)
    pos3 = iota_f[None, :, None]  # [1, F, 1]: position of each frontier row
    earlier_DxD = jnp.tril(jnp.ones((d, d), bool), k=-1)  # [i, j]: j comes before i (ascending ids in a row)
    state = dict(w=w, f=f, stamp=stamp, live=live, chart=jnp.zeros((b, n), bool),
                 counter=jnp.sum(ax_ok, axis=1, dtype=jnp.int32), trace=jnp.full((b, m), -1, jnp.int32),
                 n_trace=jnp.zeros((b,), jnp.int32), popped=jnp.full((b, n), -1, jnp.int32),
                 popped_f=jnp.full((b, n), _INF, jnp.float32), n_pops=jnp.zeros((b,), jnp.int32),
                 done=jnp.zeros((b,), bool), proved=jnp.zeros((b,), bool))

    def cond(s):
        return jnp.any(~s["done"])

    def body(s):
        w, f, chart = s["w"], s["f"], s["chart"]
        live = s["live"] & ~s["done"][:, None]
        any_live = jnp.any(live, axis=1)
        fm = jnp.min(jnp.where(live, f, _INF), axis=1)
        c1 = live & (f == fm[:, None])
        hm = jnp.min(jnp.where(c1, h_BxN, _INF), axis=1)
        front = c1 & (h_BxN == hm[:, None])
        # the frontier's first `fw` items in LIFO order (highest stamp first); stamps < 2^24 are exact in float32
        top, item = jax.lax.top_k(jnp.where(front, s["stamp"], -1).astype(jnp.float32), fw)  # [B, F]
        in_win = top >= 0
        pos = _put(jnp.full((b, n), big, jnp.int32), item, jnp.broadcast_to(iota_f, (b, fw)), in_win)
        # the out-edges of each frontier item, in ascending id: [B, F, D]; an edge is an event of the row of its
        # last-popped premise (premises already in the chart count as position -1)
        oe = take_rows(out_edges_flat, item[:, :, None] * d + jnp.arange(d))
        oe = jnp.where(in_win[:, :, None], oe, -1)
        prem = take_rows(premises_flat, oe[..., None] * k + jnp.arange(k))  # [B, F, D, K]
        pm = (prem >= 0) & (oe >= 0)[..., None]
        ppos = jnp.where(chart, -1, pos)
        cpos = jnp.max(jnp.where(pm, take_rows(ppos, prem), -1), axis=3)
        event = (oe >= 0) & (cpos == pos3)
        pw = jnp.where(pm, take_rows(w, prem), 0.0)
        g = 1.0 + (jnp.max(pw, axis=3) if cost == "max" else jnp.sum(pw, axis=3))
        c = jnp.where(event, take_rows(head_BxM, oe), n)  # head, n when no event
        cand = event & ~(take_rows(chart, c) | (take_rows(pos, c) <= pos3))
        wc = take_rows(w, c)
        # the host's sequential "g < w[c]" within one row: a prefix minimum over the row's earlier events of c
        same = (c[..., :, None] == c[..., None, :]) & cand[..., None, :] & earlier_DxD  # [B, F, i, j]
        prior = jnp.min(jnp.where(same, g[..., None, :], _INF), axis=3)
        # across rows: c's first row decides; a later row of c that could still push (g below what the first row
        # left) cuts the frontier before that row, so it is decided next iteration with the updated w[c]
        c_col = jnp.where(cand, c, n)
        first = _put(jnp.full((b, n), big, jnp.int32), c, jnp.broadcast_to(pos3, c.shape), cand, "min")
        at_first = cand & (take_rows(first, c) == pos3)
        g_first = _put(jnp.full((b, n), _INF, jnp.float32), c, g, at_first, "min")
        risky = cand & ~at_first & (g < jnp.minimum(wc, take_rows(g_first, c)))
        push = at_first & (g < jnp.minimum(wc, prior))
        hc = take_rows(h_BxN, c)
        f_new = g + hc
        fm3, hm3 = fm[:, None, None], hm[:, None, None]
        jumps = push & ((f_new < fm3) | ((f_new == fm3) & (hc <= hm3)))
        p_jump = jnp.min(jnp.where(jumps, pos3, big), axis=(1, 2))
        p_risky = jnp.min(jnp.where(risky, pos3, big), axis=(1, 2))
        gcol = jnp.maximum(goal_B, 0)[:, None]
        p_goal = jnp.where(goal_B >= 0, take_rows(pos, gcol)[:, 0], big)
        last_pop = jnp.minimum(jnp.minimum(p_jump, p_goal), p_risky - 1)
        push = push & (pos3 <= last_pop[:, None, None]) & (pos3 < p_goal[:, None, None])
        pop_now = in_win & (iota_f[None, :] <= last_pop[:, None])
        # trace: rows in pop order, ids ascending within a row = the host's push order
        flat = push.reshape(b, fw * d)
        rank = (jnp.cumsum(flat, axis=1, dtype=jnp.int32) - 1).reshape(push.shape)
        n_push = jnp.sum(flat, axis=1, dtype=jnp.int32)
        trace = _put(s["trace"], s["n_trace"][:, None, None] + rank, oe, push)
        # agenda: a head's pushes all come from one row, cheapest and newest last: min weight, max stamp
        w_new = _put(w, c, g, push, "min")
        pushed = w_new < w
        stamp = _put(s["stamp"], c, s["counter"][:, None, None] + rank, push, "max")
        slot = s["n_pops"][:, None] + iota_f
        goal_popped = p_goal <= last_pop
        return dict(w=w_new, f=jnp.where(pushed, w_new + h_BxN, f), stamp=stamp,
                    live=_put(s["live"] | pushed, item, False, pop_now),
                    chart=_put(chart, item, True, pop_now),
                    counter=s["counter"] + n_push, trace=trace, n_trace=s["n_trace"] + n_push,
                    popped=_put(s["popped"], slot, item, pop_now),
                    popped_f=_put(s["popped_f"], slot, jnp.broadcast_to(fm[:, None], (b, fw)), pop_now),
                    n_pops=s["n_pops"] + jnp.sum(pop_now, axis=1, dtype=jnp.int32),
                    done=s["done"] | ~any_live | goal_popped, proved=s["proved"] | goal_popped)

    s = jax.lax.while_loop(cond, body, state)
    weight = jnp.where(s["proved"], take_rows(s["w"], jnp.maximum(goal_B, 0)[:, None])[:, 0], _INF)
    return weight, s["trace"], s["n_trace"], s["popped"], s["popped_f"], s["n_pops"]
