"""Frontier-synchronous A* for the kernel: many pops per loop iteration, still exactly the host's order.

Why: the one-pop loop of `search.kernel.astar_core` runs as many iterations as the slowest problem of the batch has
pops (Dijkstra on DeepRD: up to ~150), and on CPU every iteration costs about the same whatever it does. Here an
iteration pops a FRONTIER: the live items with the minimal (f, h) key, in the host's LIFO order (highest push stamp
first), at most `width` of them (a prefix of the host's pop order is always safe to take), and computes their
expansions at once on ONE list of E events per problem ([B, E]): the out-edges of the frontier rows in host order
(row, then ascending hyperedge id), cut after the last row whose out-edges all fit in E slots. Padded out-degree D is
the largest of the batch while most atoms have one or two out-edges, so E slots hold the work of many more rows
than E / D, and every per-event op (gathers, scatters, masks) runs on E instead of width * D elements:

* a hyperedge is an event of the row of its last-popped premise (premises already in the chart count -1); events
  are visited in (row, hyperedge id) order, which is the host's order (pop order, then ascending id);
* an event of head c pushes iff c is not in the chart at that moment (not before, and not a frontier item popped at
  or before the row) and g < w[c] as the host's sequential loop has it: within one row a prefix minimum over the
  row's earlier events of c (with one premise per hyperedge, g is the same for all of a row's events and only c's
  first event can push); across rows only c's first row can push unless a later row has a smaller g, and then the
  frontier is cut before that row (decided next iteration with the updated w[c]);
* exactness guard: a push whose key (f', h') <= (f_min, h_min) would pop before the rest of the frontier (lower
  key, or an equal key with a newer stamp, LIFO): the frontier is cut after the first row that makes one. With
  h = 0 this never happens (g > w of the popped premise), so Dijkstra takes one iteration per distinct weight (or
  per `width` items / E events). Popping the goal ends the frontier there (popped, not expanded), as the host
  returns.

Dijkstra's step counts vary by problem (DeepRD at 512 rows: median 9, slowest 17), so the loop shrinks: when only
an eighth of the rows are unfinished, those rows are gathered and loop on alone (`_loop_with_tails`).

Pushes get stamps counter + rank in this order, so the LIFO ties of later iterations match the host. The agenda is
decrease-key (see search.kernel_queue): a head pushed twice in one row keeps its last, cheapest entry.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from search.kernel_heuristics import axiom_weight
from search.kernel_rows import put_rows, take_rows

__all__ = ["astar_frontier"]

_INF = jnp.inf
_CONSTS = ("h", "goal", "deg", "oe", "head", "prem")


def _loop_with_tails(body, state, *, shrink: int, min_rows: int):
    """`body` until every row is done, in shrinking loops: once at most b // shrink rows are unfinished, they are
    gathered into a batch of b // shrink rows that loops on alone (recursively, while that batch keeps at least
    `min_rows` rows), then scattered back. A problem's steps do not depend on the other rows, so results are the
    same; the long tail of the slowest problems runs on a fraction of the batch instead of all of it."""
    b = state["done"].shape[0]
    rows_t = b // shrink if shrink > 1 else 0
    if rows_t < min_rows:
        return jax.lax.while_loop(lambda s: jnp.any(~s["done"]), body, state)
    state = jax.lax.while_loop(lambda s: jnp.sum(~s["done"]) > rows_t, body, state)
    _, rows = jax.lax.top_k((~state["done"]).astype(jnp.float32), rows_t)  # every unfinished row, then done ones
    tail = _loop_with_tails(body, jax.tree.map(lambda x: x[rows], state), shrink=shrink, min_rows=min_rows)
    return jax.tree.map(lambda x, y: x.at[rows].set(y), state, tail)


def _cumsum(x_BxL):
    """Inclusive prefix sum along the last axis of small non-negative integers (< 2^24) as one float32 matmul
    with a triangular matrix: XLA:CPU lowers jnp.cumsum to a reduce-window that costs several times more."""
    length = x_BxL.shape[-1]
    tri = jnp.triu(jnp.ones((length, length), jnp.float32))
    return jnp.dot(x_BxL.astype(jnp.float32), tri, precision=jax.lax.Precision.HIGHEST).astype(jnp.int32)


def initial_agenda(axiom_order_BxN, h_BxN, *, cost: str):
    """The agenda before the first pop: every axiom pushed with weight a0 (cost "max": 0, "sum": 1), f = a0 + h,
    push stamps in axiom order. axiom_order_BxN: atom ids of the axioms, -1 padded.
    Returns (w_BxN, f_BxN, stamp_BxN, live_BxN, axiom_valid_BxN)."""
    b, n = h_BxN.shape
    a0 = axiom_weight(cost)
    ax_ok = axiom_order_BxN >= 0
    # one scatter (the stamps); the rest follows from "has a stamp"
    stamp = put_rows(jnp.full((b, n), -1, jnp.int32), axiom_order_BxN,
                 jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (b, n)), ax_ok)
    live = stamp >= 0
    w = jnp.where(live, jnp.float32(a0), _INF)
    f = jnp.where(live, a0 + h_BxN, _INF)
    return w, f, stamp, live, ax_ok


def astar_frontier(axiom_order_BxN, premises_BxMxK, head_BxM, out_edges_BxNxD, goal_B, h_BxN, *, cost: str,
                   width: int = 16, events: int = 32, shrink: int = 8, min_rows: int = 32):
    """A* on a padded batch, one frontier (up to `width` items of the minimal (f, h) key whose out-edges number at
    most `events`, cut for exactness) per unfinished problem per loop step; once at most 1/`shrink` of the rows are
    unfinished they loop on in a batch of that size (see `_loop_with_tails`; not below `min_rows` rows). Returns
    (weight_B, trace_BxM, pushes_B, popped_BxN, popped_f_BxN, pops_B), the same as `search.kernel.astar_core`."""
    b, n, d = out_edges_BxNxD.shape
    m, k = premises_BxMxK.shape[1:]
    fw = max(1, min(int(width), n))
    ne = max(d, min(int(events), fw * d))  # one item's out-edges always fit, so every step pops
    big = jnp.int32(n)  # "not in the frontier window": positions are 0..fw-1
    w, f, stamp, live, ax_ok = initial_agenda(axiom_order_BxN, h_BxN, cost=cost)
    iota_f = jnp.arange(fw, dtype=jnp.int32)
    iota_e = jnp.arange(ne, dtype=jnp.int32)
    deg_BxN = jnp.sum(out_edges_BxNxD >= 0, axis=2, dtype=jnp.int32)
    out_edges_flat = out_edges_BxNxD.reshape(b, n * d)
    premises_flat = premises_BxMxK.reshape(b, m * k)
    earlier_ExE = jnp.tril(jnp.ones((ne, ne), bool), k=-1)  # [i, j]: event j comes before event i
    # per-problem constants ride in the loop state, so the tail loop can take a subset of rows
    state = dict(h=h_BxN, goal=goal_B, deg=deg_BxN, oe=out_edges_flat, head=head_BxM, prem=premises_flat,
                 w=w, f=f, stamp=stamp, live=live, chart=jnp.zeros((b, n), bool),
                 counter=jnp.sum(ax_ok, axis=1, dtype=jnp.int32), trace=jnp.full((b, m), -1, jnp.int32),
                 n_trace=jnp.zeros((b,), jnp.int32), popped=jnp.full((b, n), -1, jnp.int32),
                 popped_f=jnp.full((b, n), _INF, jnp.float32), n_pops=jnp.zeros((b,), jnp.int32),
                 done=jnp.zeros((b,), bool), proved=jnp.zeros((b,), bool))

    def body(s):
        b = s["w"].shape[0]
        h_BxN, goal_B, deg_BxN = s["h"], s["goal"], s["deg"]
        out_edges_flat, head_BxM, premises_flat = s["oe"], s["head"], s["prem"]
        w, f, chart, live = s["w"], s["f"], s["chart"], s["live"]
        any_live = jnp.any(live, axis=1)
        fm = jnp.min(jnp.where(live, f, _INF), axis=1)
        c1 = live & (f == fm[:, None])
        hm = jnp.min(jnp.where(c1, h_BxN, _INF), axis=1)
        front = c1 & (h_BxN == hm[:, None])
        # the frontier's first `fw` items in LIFO order (highest stamp first); stamps < 2^24 are exact in float32
        top, item = jax.lax.top_k(jnp.where(front, s["stamp"], -1).astype(jnp.float32), fw)  # [B, F]
        in_win = top >= 0
        pos = put_rows(jnp.full((b, n), big, jnp.int32), item, jnp.broadcast_to(iota_f, (b, fw)), in_win)
        # the out-edges of the window's rows as ONE list of events in host order (row, then ascending id), cut
        # after the last row whose out-edges all fit in `ne` slots (a prefix of the pop order is always exact)
        deg = jnp.where(in_win, take_rows(deg_BxN, item), 0)
        end = _cumsum(deg)
        fits = in_win & (end <= ne)
        n_fit = jnp.sum(fits, axis=1, dtype=jnp.int32)
        total = jnp.max(jnp.where(fits, end, 0), axis=1)
        marks = put_rows(jnp.zeros((b, ne), jnp.int32), end, jnp.ones_like(end), fits & (end < ne), "add")
        row = jnp.minimum(_cumsum(marks), fw - 1)  # [B, E]: frontier row of each event
        ev_ok = iota_e[None, :] < total[:, None]
        item_e = take_rows(item, row)
        slot = item_e * d + iota_e[None, :] - take_rows(end - deg, row)
        oe = jnp.where(ev_ok, take_rows(out_edges_flat, slot), -1)
        ppos = jnp.where(chart, -1, pos)
        if k == 1:
            # one premise, the row's item: every out-edge is an event, g = 1 + w[item] (max and sum agree)
            event = ev_ok
            g = 1.0 + take_rows(w, item_e)
        else:
            prem = take_rows(premises_flat, oe[..., None] * k + jnp.arange(k))  # [B, E, K]
            pm = (prem >= 0) & ev_ok[..., None]
            # an edge is an event of the row of its last-popped premise (chart premises count as -1)
            cpos = jnp.max(jnp.where(pm, take_rows(ppos, prem), -1), axis=2)
            event = ev_ok & (cpos == row)
            pw = jnp.where(pm, take_rows(w, prem), 0.0)
            g = 1.0 + (jnp.max(pw, axis=2) if cost == "max" else jnp.sum(pw, axis=2))
        # head, n when no event (a gather per step: a per-atom head table would cost more to build per call)
        c = jnp.where(event, take_rows(head_BxM, oe), n)
        # c off the chart and not a frontier item popped at or before this row
        cand = event & (take_rows(ppos, c) > row)
        wc = take_rows(w, c)
        if k == 1:
            # g is the same for a row's events, so of c's events in a row only the first can push; `first` = c's
            # first event (a scatter-min of the event index, which is host order)
            first = put_rows(jnp.full((b, n), ne, jnp.int32), c, jnp.broadcast_to(iota_e, c.shape), cand, "min")
            fc = take_rows(first, c)
            at_first = cand & (take_rows(row, fc) == row)
            push = cand & (fc == iota_e[None, :]) & (g < wc)
            g_first = take_rows(g, fc)
        else:
            # the host's sequential "g < w[c]" within one row: a prefix minimum over the row's earlier events of c
            same = ((c[:, :, None] == c[:, None, :]) & cand[:, None, :] & (row[:, :, None] == row[:, None, :])
                    & earlier_ExE)  # [B, i, j]
            prior = jnp.min(jnp.where(same, g[:, None, :], _INF), axis=2)
            first = put_rows(jnp.full((b, n), big, jnp.int32), c, row, cand, "min")
            at_first = cand & (take_rows(first, c) == row)
            g_first = take_rows(put_rows(jnp.full((b, n), _INF, jnp.float32), c, g, at_first, "min"), c)
            push = at_first & (g < jnp.minimum(wc, prior))
        # across rows: c's first row decides; a later row of c that could still push (g below what the first row
        # left) cuts the frontier before that row, so it is decided next iteration with the updated w[c]
        risky = cand & ~at_first & (g < jnp.minimum(wc, g_first))
        hc = take_rows(h_BxN, c)
        f_new = g + hc
        fm2, hm2 = fm[:, None], hm[:, None]
        jumps = push & ((f_new < fm2) | ((f_new == fm2) & (hc <= hm2)))
        # a jump ends the frontier after its row, a risky row before it, the event budget after the last fitting row
        p_cut = jnp.min(jnp.where(jumps, row, jnp.where(risky, row - 1, big - 1)), axis=1)
        gcol = jnp.maximum(goal_B, 0)[:, None]
        p_goal = jnp.where(goal_B >= 0, take_rows(pos, gcol)[:, 0], big)
        last_pop = jnp.minimum(jnp.minimum(p_cut, n_fit - 1), p_goal)
        push = push & (row <= last_pop[:, None]) & (row < p_goal[:, None])
        pop_now = in_win & (iota_f[None, :] <= last_pop[:, None])
        # events are in the host's push order: stamps and trace slots by rank
        rank = _cumsum(push) - 1
        n_push = jnp.sum(push, axis=1, dtype=jnp.int32)
        trace = put_rows(s["trace"], s["n_trace"][:, None] + rank, oe, push)
        # agenda: a head's pushes all come from one row, cheapest and newest last: min weight, max stamp
        w_new = put_rows(w, c, g, push, "min")
        stamp = put_rows(s["stamp"], c, s["counter"][:, None] + rank, push, "max")
        live = put_rows(put_rows(live, c, True, push), item, False, pop_now)
        slot_p = s["n_pops"][:, None] + iota_f
        goal_popped = p_goal <= last_pop
        done = s["done"] | ~any_live | goal_popped
        return dict({key: s[key] for key in _CONSTS}, w=w_new, f=put_rows(f, c, f_new, push, "min"), stamp=stamp,
                    live=live & ~done[:, None],
                    chart=put_rows(chart, item, True, pop_now),
                    counter=s["counter"] + n_push, trace=trace, n_trace=s["n_trace"] + n_push,
                    popped=put_rows(s["popped"], slot_p, item, pop_now),
                    popped_f=put_rows(s["popped_f"], slot_p, jnp.broadcast_to(fm[:, None], (b, fw)), pop_now),
                    n_pops=s["n_pops"] + jnp.sum(pop_now, axis=1, dtype=jnp.int32),
                    done=done, proved=s["proved"] | goal_popped)

    s = _loop_with_tails(body, state, shrink=shrink, min_rows=min_rows)
    weight = jnp.where(s["proved"], take_rows(s["w"], jnp.maximum(goal_B, 0)[:, None])[:, 0], _INF)
    return weight, s["trace"], s["n_trace"], s["popped"], s["popped_f"], s["n_pops"]
