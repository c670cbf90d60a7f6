"""Frontier-synchronous A* step for the kernel: many pops per loop iteration, still exactly the host's order.

Why: the one-pop loop of `search.kernel.astar_core` runs as many iterations as the slowest problem of the batch has
pops (Dijkstra on DeepRD: up to ~190), and each iteration costs the same fixed XLA overhead whatever it does. Here an
iteration pops the whole FRONTIER S = every live item with the minimal (f, h) key, in the host's LIFO order (highest
push stamp first), and computes all their expansions at once:

* position of an item in S = number of S items with a higher stamp (stamps are unique, so a scatter into a
  stamp-indexed array and a reverse cumsum give it in O(N + M));
* a hyperedge completes at the position of its last-popped premise (cpos; premises already in the chart count -1);
  completions are visited in (cpos, hyperedge id) order, which is the host's order (pop order, then ascending id);
* a completion of head c pushes iff c is not in the chart at that moment (not before the layer, and not an S item
  popped at or before cpos) and g < min(w[c] before the layer, g of every earlier completion of c in this layer):
  the host's sequential "g < w[c]" rule written as a prefix minimum over c's in-edges (`in_edges_BxNxI`);
* exactness guard: a push whose key (f', h') <= (f_min, h_min) would be popped before the rest of S (lower key, or
  equal key with a newer stamp, LIFO). The layer is cut after the first position that makes such a push; pops and
  expansions up to that position depend only on earlier positions, so they are exact. With h = 0 this never
  happens (g > w of the popped premise), so Dijkstra runs one iteration per distinct weight. Popping the goal cuts
  the layer at the goal (popped, not expanded), as the host returns there.

Pushes get stamps counter + rank in this (cpos, id) order, so the LIFO ties of later layers match the host. The
agenda is decrease-key (see search.kernel_queue): an atom re-pushed in a layer keeps its last (cheapest) entry.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from search.kernel_heuristics import axiom_weight

__all__ = ["astar_frontier"]

_INF = jnp.inf


def _take(x_BxL, idx):
    """Per-row gather x[b, idx[b, ...]] with idx clipped (callers mask invalid ones)."""
    shape = idx.shape
    flat = jnp.clip(idx, 0, x_BxL.shape[1] - 1).reshape(shape[0], -1)
    return jnp.take_along_axis(x_BxL, flat, axis=1).reshape(shape)


def astar_frontier(axiom_order_BxN, premises_BxMxK, head_BxM, out_edges_BxNxD, in_edges_BxNxI, goal_B, h_BxN, *,
                   cost: str):
    """A* on a padded batch, one frontier (all items of the minimal (f, h) key, cut for exactness) per unfinished
    problem per loop step. Returns (weight_B, trace_BxM, pushes_B, popped_BxN, popped_f_BxN, pops_B), the same as
    `search.kernel.astar_core`."""
    b, n, d = out_edges_BxNxD.shape
    m, k = premises_BxMxK.shape[1:]
    i_deg = in_edges_BxNxI.shape[2]
    rows = jnp.arange(b)[:, None]
    rows3 = rows[:, :, None]
    big = jnp.int32(n)  # "no position": positions are 0..n-1
    a0 = axiom_weight(cost)
    ax_ok = axiom_order_BxN >= 0
    ax_col = jnp.where(ax_ok, axiom_order_BxN, n)
    iota_n = jnp.arange(n, dtype=jnp.int32)
    w = jnp.full((b, n), _INF, jnp.float32).at[rows, ax_col].set(a0, mode="drop")
    f = jnp.full((b, n), _INF, jnp.float32).at[rows, ax_col].set(a0 + _take(h_BxN, axiom_order_BxN), mode="drop")
    stamp = jnp.full((b, n), -1, jnp.int32).at[rows, ax_col].set(jnp.broadcast_to(iota_n, (b, n)), mode="drop")
    live = jnp.zeros((b, n), bool).at[rows, ax_col].set(True, mode="drop")
    pm = premises_BxMxK >= 0
    ie_ok = in_edges_BxNxI >= 0
    # j before i among one head's in-edges, for equal completion positions (in-edge lists are in ascending id)
    lower_id_IxI = jnp.tril(jnp.ones((i_deg, i_deg), bool), k=-1).T  # [j, i]: j < i
    n_stamps = n + m  # axioms 0..n-1 at most, then one stamp per push (each hyperedge completes once)
    state = dict(w=w, f=f, stamp=stamp, live=live, chart=jnp.zeros((b, n), bool),
                 counter=jnp.sum(ax_ok, axis=1, dtype=jnp.int32), trace=jnp.full((b, m), -1, jnp.int32),
                 n_trace=jnp.zeros((b,), jnp.int32), popped=jnp.full((b, n), -1, jnp.int32),
                 popped_f=jnp.full((b, n), _INF, jnp.float32), n_pops=jnp.zeros((b,), jnp.int32),
                 done=jnp.zeros((b,), bool), proved=jnp.zeros((b,), bool))

    def cond(s):
        return jnp.any(~s["done"])

    def body(s):
        w, f, stamp, chart = s["w"], s["f"], s["stamp"], s["chart"]
        live = s["live"] & ~s["done"][:, None]
        any_live = jnp.any(live, axis=1)
        fm = jnp.min(jnp.where(live, f, _INF), axis=1)
        c1 = live & (f == fm[:, None])
        hm = jnp.min(jnp.where(c1, h_BxN, _INF), axis=1)
        front = c1 & (h_BxN == hm[:, None])
        # LIFO position: S items with a higher stamp pop first
        by_stamp = jnp.zeros((b, n_stamps), jnp.int32).at[rows, jnp.where(front, stamp, n_stamps)].set(
            1, mode="drop")
        higher = jnp.flip(jnp.cumsum(jnp.flip(by_stamp, axis=1), axis=1), axis=1)  # items with stamp >= t
        pos = jnp.where(front, _take(higher, stamp) - 1, big)
        # completion position of every hyperedge: -1 all premises in the chart already, big incomplete
        ppos = jnp.where(chart, -1, pos)
        cpos_M = jnp.max(jnp.where(pm, _take(ppos, premises_BxMxK), -1), axis=2)
        event_M = (cpos_M >= 0) & (cpos_M < big) & (head_BxM >= 0)
        pw = jnp.where(pm, _take(w, premises_BxMxK), 0.0)
        g_M = 1.0 + (jnp.max(pw, axis=2) if cost == "max" else jnp.sum(pw, axis=2))
        # per head (row) over its in-edges [B, N, I]
        cpos = jnp.where(ie_ok, _take(cpos_M, in_edges_BxNxI), big)
        ev = ie_ok & _take(event_M, in_edges_BxNxI)
        g = _take(g_M, in_edges_BxNxI)
        in_chart_then = chart[:, :, None] | (pos[:, :, None] <= cpos)
        cand = ev & ~in_chart_then
        earlier = (cpos[:, :, :, None] < cpos[:, :, None, :]) | (
            (cpos[:, :, :, None] == cpos[:, :, None, :]) & lower_id_IxI)  # [B, N, j, i]
        prior = jnp.min(jnp.where(cand[:, :, :, None] & earlier, g[:, :, :, None], _INF), axis=2)
        push = cand & (g < jnp.minimum(w[:, :, None], prior))
        f_new = g + h_BxN[:, :, None]
        hh = h_BxN[:, :, None]
        jumps = push & ((f_new < fm[:, None, None]) | ((f_new == fm[:, None, None]) & (hh <= hm[:, None, None])))
        p_cut = jnp.min(jnp.where(jumps, cpos, big), axis=(1, 2))
        gcol = jnp.maximum(goal_B, 0)[:, None]
        p_goal = jnp.where(goal_B >= 0, _take(pos, gcol)[:, 0], big)
        last_pop = jnp.minimum(p_cut, p_goal)
        push = push & (cpos <= p_cut[:, None, None]) & (cpos < p_goal[:, None, None])
        popped_now = front & (pos <= last_pop[:, None])
        # trace order (cpos, id): per position, the out-edges of the item popped there, in ascending id
        push_M = jnp.zeros((b, m), bool).at[rows3, jnp.where(push, in_edges_BxNxI, m)].set(True, mode="drop")
        per_pos = jnp.zeros((b, n + 1), jnp.int32).at[rows, jnp.where(push_M, cpos_M, n)].add(1, mode="drop")
        offset = jnp.cumsum(per_pos, axis=1) - per_pos
        item_at = jnp.full((b, n + 1), -1, jnp.int32).at[rows, jnp.where(popped_now, pos, n)].set(
            jnp.broadcast_to(iota_n, (b, n)), mode="drop")[:, :n]
        oe = jnp.take_along_axis(out_edges_BxNxD, jnp.maximum(item_at, 0)[:, :, None], axis=1)
        oe = jnp.where((item_at >= 0)[:, :, None], oe, -1)  # [B, position, D]
        pf = (oe >= 0) & _take(push_M, oe) & (_take(cpos_M, oe) == iota_n[None, :, None])
        rank = offset[:, :n, None] + jnp.cumsum(pf, axis=2, dtype=jnp.int32) - 1
        trace = s["trace"].at[rows3, jnp.where(pf, s["n_trace"][:, None, None] + rank, m)].set(oe, mode="drop")
        rank_M = jnp.zeros((b, m), jnp.int32).at[rows3, jnp.where(pf, oe, m)].set(rank, mode="drop")
        # agenda: a head pushed in this layer keeps its last entry (cheapest g, newest stamp)
        pushed = jnp.any(push, axis=2)
        g_last = jnp.min(jnp.where(push, g, _INF), axis=2)
        r_last = jnp.max(jnp.where(push, _take(rank_M, in_edges_BxNxI), -1), axis=2)
        n_push = jnp.sum(push_M, axis=1, dtype=jnp.int32)
        slot = jnp.where(popped_now, s["n_pops"][:, None] + pos, n)
        goal_popped = (p_goal <= p_cut) & (p_goal < big)
        return dict(w=jnp.where(pushed, g_last, w), f=jnp.where(pushed, g_last + h_BxN, f),
                    stamp=jnp.where(pushed, s["counter"][:, None] + r_last, stamp),
                    live=(s["live"] | pushed) & ~popped_now, chart=chart | popped_now,
                    counter=s["counter"] + n_push, trace=trace, n_trace=s["n_trace"] + n_push,
                    popped=s["popped"].at[rows, slot].set(jnp.broadcast_to(iota_n, (b, n)), mode="drop"),
                    popped_f=s["popped_f"].at[rows, slot].set(jnp.broadcast_to(fm[:, None], (b, n)), mode="drop"),
                    n_pops=s["n_pops"] + jnp.sum(popped_now, axis=1, dtype=jnp.int32),
                    done=s["done"] | ~any_live | goal_popped, proved=s["proved"] | goal_popped)

    s = jax.lax.while_loop(cond, body, state)
    weight = jnp.where(s["proved"], _take(s["w"], jnp.maximum(goal_B, 0)[:, None])[:, 0], _INF)
    return weight, s["trace"], s["n_trace"], s["popped"], s["popped_f"], s["n_pops"]
