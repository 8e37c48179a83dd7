"""The memory each rank is expected to hold at its peak (explain, ``explain --estimate``, ``workers="auto"``).

A rank's need in one stage is its process (:data:`PROCESS_BYTES`: interpreter and libraries) plus

- the exchanged inputs it received, held as Arrow while the stage runs;
- what the stage's operator keeps while it runs, by the stage's shape (:func:`~.workload.stage_shape`):
  a join keeps every input but its largest (the probe side streams) in hash tables, an aggregate keeps its
  groups on that rank (its share of the stage's output), both at :data:`HASH_FACTOR` times their Arrow
  bytes; a sort keeps all its input; a scan or projection streams (:data:`STREAM_BYTES`).

Its peak is its largest need over the stages. Sizes are the workload's (:mod:`.workload`): scans exact from
the footers, stage outputs measured or guessed by shape, so the figure is as rough as those guesses. It says
what the plan asks of a rank, not what the rank will use: with a budget, a worker holds received inputs
past a quarter of it on disk and DuckDB spills past its share (:mod:`squall.operators.memory`); a need above
the budget is then time spent spilling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from squall.driver.forecast.scale.workload import StageWork, Workload
from squall.operators.memory import human_bytes

#: a worker process before any query: the interpreter, DuckDB, PyArrow
PROCESS_BYTES = 130 << 20
#: a hash table (join build side, aggregate groups) over its rows' Arrow bytes
HASH_FACTOR = 2.0
#: what a streaming stage holds: a few row groups and batches in flight
STREAM_BYTES = 128 << 20


@dataclass(frozen=True)
class StageNeed:
    """One stage's need per rank (bytes, length W) and what makes it up on its largest rank."""

    stage: int
    per_rank: np.ndarray
    received: float
    operator: float
    what: str


@dataclass(frozen=True)
class MemoryNeed:
    """Per rank, the most any stage of the plan asks it to hold (``per_rank``, bytes), and the stage that does."""

    per_rank: np.ndarray
    top: StageNeed

    @property
    def peak(self) -> float:
        return float(self.per_rank.max()) if len(self.per_rank) else float(PROCESS_BYTES)

    @property
    def rank(self) -> int:
        return int(self.per_rank.argmax()) if len(self.per_rank) else 0

    def fits(self, budget: float) -> bool:
        return self.peak <= budget

    def line(self, budget: float | None) -> str:
        """``expected peak …`` as explain prints it; with ``budget``, whether it fits or spills."""
        top = self.top
        parts = [f"received {human_bytes(top.received)}"] if top.received >= 1 << 20 else []
        if top.operator >= 1 << 20:
            parts.append(f"{top.what} {human_bytes(top.operator)}")
        held = f": {', '.join(parts)}" if parts else ""
        text = f"expected peak {human_bytes(self.peak)} on rank {self.rank} (stage {top.stage}{held})"
        ranks = self.per_rank[self.per_rank > 0]
        if len(ranks) > 1 and self.peak > 1.25 * float(ranks.mean()):
            text += f", mean {human_bytes(float(ranks.mean()))} per rank"
        if budget is None:
            return text + ", no budget set"
        if self.fits(budget):
            return text + f", within the budget of {human_bytes(budget)}"
        return (
            text + f", over the budget of {human_bytes(budget)}: about {human_bytes(self.peak - budget)} "
            "goes to disk (received inputs, DuckDB's spill)"
        )


def _operator(st: StageWork, rank: int) -> tuple[float, str]:
    sides = sorted(float(b[rank]) for b in st.input_bytes) if st.input_bytes else []
    if st.shape == "join" and len(sides) > 1:
        return HASH_FACTOR * sum(sides[:-1]), "join hash tables"
    if st.shape == "aggregate" and st.rows_out > 0:
        share = st.out_share(rank)
        return HASH_FACTOR * st.bytes_out * share, "aggregate groups"
    if st.shape == "sort":
        return sum(sides), "sort"
    return float(STREAM_BYTES), "streaming"


def stage_need(st: StageWork) -> StageNeed:
    """What ``st`` asks each of its ranks to hold (process included)."""
    world = len(st.in_bytes)
    per = np.zeros(world)
    top = (0.0, 0.0, "streaming")
    for r in st.ranks:
        op, what = _operator(st, r)
        per[r] = PROCESS_BYTES + float(st.in_bytes[r]) + op
        if per[r] >= per.max():
            top = (float(st.in_bytes[r]), op, what)
    return StageNeed(st.id, per, top[0], top[1], top[2])


def memory_need(work: Workload) -> MemoryNeed:
    """The plan's need per rank (:func:`stage_need` of every stage, largest per rank) and its largest stage."""
    needs = [stage_need(st) for st in work.stages]
    if not needs:
        empty = StageNeed(0, np.full(work.world, float(PROCESS_BYTES)), 0.0, 0.0, "streaming")
        return MemoryNeed(empty.per_rank, empty)
    per_rank = np.max(np.stack([n.per_rank for n in needs]), axis=0)
    top = max(needs, key=lambda n: float(n.per_rank.max()))
    return MemoryNeed(per_rank, top)
