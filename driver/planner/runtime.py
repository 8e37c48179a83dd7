"""Run-time join decisions: broadcast or hash-partition, decided from the actual size of a join side.

The planner chooses broadcast vs hash from estimates (:func:`~squall.driver.planner.rules.joins._broadcast_choice`:
a side under ``broadcast_limit`` whose W copies cost no more than moving the other side). Some estimates
rest on guesses: a filter the statistics cannot price (``LIKE``, a comparison of two columns, a filter above
a join; a column against constants, and ``AND``/``OR``/``NOT`` of those, is priced by min/max and NDVs), a
``GROUP BY`` (a tenth of its input), ``HAVING``, a semi or anti join (half its left
side). When the side S that may be broadcast has such an estimate and the estimate lies within
``runtime_join_spread`` (10x) of the decision's threshold either way, and the other side is estimated at
``runtime_join_min_bytes`` (1 MB) or more (what a broadcast would keep in place), the choice is left to run
time:

- both sides are cut as hash exchanges over all ranks, marked ``Output.runtime_join`` = S's stage id
  (roles "decides" for S, "stays" for the other side B) with ``Output.runtime_limit`` = the threshold
  ``min(broadcast_limit, B's estimated bytes * broadcast_factor / W)``;
- on every rank (:mod:`squall.operators.runtime_join`), once S's stage has run and before its rows move,
  the senders' actual sizes are shared through ``Exchange.sizes`` (metadata, no data); S at or under the
  limit goes whole to every rank and B's rows stay where they were made (B's exchange is skipped), else
  both go by hash as planned.

Where the planner would broadcast S, both sides are built first (:func:`~squall.driver.planner.rules.joins.plan`)
and the choice goes to run time only when both come out spread over the ranks, to be hashed by fresh
exchanges; otherwise S is broadcast as planned. Sides are estimated as their planned join filters leave them.

The join's output :class:`~squall.driver.planner.core.Dist` is the hash on its keys with ``group`` = S's
stage id: a later step that relies on that partitioning (a co-located join, an aggregate in place) calls
:meth:`~squall.driver.planner.core.Context.rely_on`, which turns the decision off (plain hash: after a
broadcast the output lies where B's rows were). A side whose exchange another stage reads too (a join
filter's build, a reused subplan) keeps the planned hash (:func:`finish`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sqlglot import exp

from squall.driver.catalog.literals import column_constraint
from squall.driver.ir import nodes as L
from squall.driver.options import megabytes
from squall.driver.planner import splits
from squall.driver.planner.core import Context
from squall.plan import ExchangeInput

#: join kinds whose side S may go to every rank while the other side's rows stay where they are: (S, B)
_SIDES = {
    "inner": (("right", "left"), ("left", "right")),
    "left": (("right", "left"),),
    "semi": (("right", "left"),),
    "anti": (("right", "left"),),
    "right": (("left", "right"),),
}
_PRICED = ("lt", "lte", "gt", "gte", "between", "eq", "in")


def guesses(node: L.Node) -> list[str]:
    """Why ``node``'s estimated rows rest on guessed selectivities (empty: from statistics alone)."""
    out: list[str] = []
    if isinstance(node, L.Scan):
        return [f"filter {L.sql_of(f)} on {node.table}" for f in node.filters if not _priced(f)]
    if isinstance(node, L.Filter):
        out.append(f"filter {L.sql_of(node.predicate)}")
    elif isinstance(node, L.Join) and node.kind in ("semi", "anti"):
        out.append(f"{node.kind} join")
    elif isinstance(node, L.Aggregate) and node.keys:
        out.append("GROUP BY " + ", ".join(name for name, _e in node.keys))
    for child in node.children:
        out += guesses(child)
    return out


def _priced(pred: exp.Expression) -> bool:
    """Whether the statistics price ``pred`` (a column against constants: min/max ranges, NDVs; and/or/not of
    such), rather than a flat guess (driver/estimate/selectivity.py)."""
    if isinstance(pred, (exp.And, exp.Or)):
        return _priced(pred.this) and _priced(pred.expression)
    if isinstance(pred, (exp.Not, exp.Paren)):
        return _priced(pred.this)
    c = column_constraint(pred)
    return c is not None and c[1] in _PRICED


def candidate(
    ctx: Context, node: L.Join, est_bytes: Callable[[L.Node], float]
) -> tuple[str, float, str] | None:
    """(side S, limit in bytes, why the estimate is uncertain) when ``node``'s broadcast-vs-hash choice is left
    to run time (module doc); else None. ``est_bytes`` gives a subtree's estimated bytes (once the join filters
    planned onto its scans cut it)."""
    opts = ctx.options
    if not opts.runtime_join or ctx.world < 2 or node.null_aware or not node.left_keys:
        return None
    sides = _SIDES.get(node.kind, ())
    best: tuple[str, float, str] | None = None
    for s_side, b_side in sides:
        small, big = getattr(node, s_side), getattr(node, b_side)
        if splits.replicable(ctx, small):  # every rank reads it whole at no exchange: nothing to decide
            continue
        why = guesses(small)
        if not why:
            continue
        s_est, b_est = est_bytes(small), est_bytes(big)
        limit = min(opts.broadcast_limit, b_est * opts.broadcast_factor / ctx.world)
        if b_est < opts.runtime_join_min_bytes:  # too little stays in place to be worth a decision
            continue
        spread = opts.runtime_join_spread
        if limit <= 0 or not (limit / spread <= s_est <= limit * spread):
            continue
        if best is None or s_est < est_bytes(getattr(node, best[0])):
            reason = "; ".join(dict.fromkeys(why))
            best = (s_side, limit, f"estimated {megabytes(s_est)} rests on guesses ({reason})")
    return best


def mark(ctx: Context, node: L.Join, side: str, limit: float, why: str, left: L.Node, right: L.Node) -> int:
    """Mark the just-cut hash exchanges feeding ``left`` and ``right`` as one run-time join with ``side`` the
    one that decides. Returns the join's id (S's stage id; 0 when the exchanges do not qualify)."""
    ids = {s: _hash_stage(ctx, ref) for s, ref in (("left", left), ("right", right))}
    s_id, b_id = ids[side], ids["right" if side == "left" else "left"]
    if s_id is None or b_id is None:
        return 0
    for sid, role in ((s_id, "decides"), (b_id, "stays")):
        index = next(i for i, s in enumerate(ctx.stages) if s.id == sid)
        stage = ctx.stages[index]
        out = dataclasses.replace(stage.output, runtime_join=s_id, runtime_role=role, runtime_limit=limit)
        ctx.stages[index] = dataclasses.replace(stage, output=out)
    keys = ", ".join(f"{L.sql_of(a)} = {L.sql_of(b)}" for a, b in zip(node.left_keys, node.right_keys))
    ctx.notes.append(
        f"{node.kind} join on {keys}: broadcast or hash decided at run time from the actual size of stage "
        f"{s_id}'s output, limit {megabytes(limit)} ({why})"
    )
    return s_id


def finish(ctx: Context) -> None:
    """Unmark run-time joins whose exchanges another stage reads too (a join filter's build, a reused subplan):
    they keep the planned hash. (After a broadcast, a filter stage would build over all of S on every rank.)"""
    readers: dict[int, set[int]] = {}
    for stage in ctx.stages:
        for inp in stage.inputs:
            if isinstance(inp, ExchangeInput):
                readers.setdefault(inp.stage, set()).add(stage.id)
    members: dict[int, list[int]] = {}
    for stage in ctx.stages:
        if stage.output.runtime_join:
            members.setdefault(stage.output.runtime_join, []).append(stage.id)
    for join, ids in members.items():
        read = [readers.get(i, set()) for i in ids]
        if (
            len(ids) == 2
            and all(len(r) == 1 for r in read)
            and read[0] == read[1]
            and not ctx.shared & set(ids)
        ):
            continue
        unmark(ctx, join, "its exchanges are read by more than the join")


def unmark(ctx: Context, join: int, why: str) -> None:
    """Turn run-time join ``join`` back into the planned hash (``why`` goes into the stages' notes)."""
    ctx.drop_runtime_join(join, why)


def _hash_stage(ctx: Context, ref: L.Node) -> int | None:
    """The id of the stage whose plain hash exchange over all ranks feeds input ``ref``, else None."""
    spec = ctx.inputs.get(getattr(ref, "name", ""))
    if not isinstance(spec, ExchangeInput) or spec.stage in ctx.shared:
        return None
    everyone = tuple(range(ctx.world))
    stage = next(s for s in ctx.stages if s.id == spec.stage)
    out = stage.output
    if (
        out.kind != "hash"
        or out.partitions
        or out.split_ranges
        or out.runtime_join
        or stage.ranks != everyone
    ):
        return None
    if out.senders != everyone or out.receivers != everyone:
        return None
    return spec.stage
