"""Run-time join decisions on a worker: broadcast or hash-partition, from the actual size of a join side.

A join whose planner estimate is uncertain (``squall.driver.planner.runtime``) has two hash exchanges over
all ranks marked with ``Output.runtime_join`` = the id of the stage S whose size decides (the side that may
go to every rank, role "decides") and the other side's stage B (role "stays"). On every rank:

1. when S's stage has run, before any of its rows move, the rank publishes the rows and data bytes it holds
   through :meth:`~squall.exchange.base.Exchange.sizes` (a metadata collective: a file, an empty S3 object,
   a rendezvous key) and gets every sender's; the sum is the same on every rank, so every rank takes the same
   decision: **broadcast** when S's bytes are at most ``Output.runtime_limit``, else **hash**;
2. broadcast: S's rows go whole to every rank (a broadcast exchange) and B's rows stay on the rank that made
   them — B's exchange is skipped on every rank (no request, no copy); hash: both go by ``hash % W`` as
   planned. When B's stage runs before S's (plan order), B's output is held until the decision.

The bytes are *data bytes* (fixed-width values at their width, strings at their length plus a 4-byte
offset, 16 bytes a row for nested values), not Arrow buffer or IPC sizes: the same rows give the same
number however they are chunked or ordered, so a retried or duplicated sender publishes what the first
copy did, and an exchange that keeps the first value still yields one decision on every rank.

An exchange without ``sizes`` (``supports_sizes`` False) keeps the planned hash. Each member's
:class:`~squall.operators.worker.StageReport` gets a ``runtime`` dict (decision, S's actual rows and bytes,
the limit, the sizes round's seconds) that the driver merges into ``Result.stats["exchanges"]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from squall.exchange.base import Exchange, ExchangeSpec
from squall.operators.partition import PART_COLUMN, split_by_partition
from squall.operators.skew import remote_bytes
from squall.plan import Plan, Stage

#: bytes counted per row of a nested (list, struct, map) column
NESTED_ROW_BYTES = 16


def data_bytes(table: pa.Table) -> int:
    """Bytes of ``table``'s values, independent of chunking and row order (module doc)."""
    total = 0
    for column in table.columns:
        t = column.type
        if (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
            or pa.types.is_string_view(t)
            or pa.types.is_binary_view(t)
        ):
            lengths = pc.sum(pc.binary_length(column)).as_py() if len(column) else 0
            total += int(lengths or 0) + 4 * len(column)
        elif pa.types.is_nested(t):
            total += NESTED_ROW_BYTES * len(column)
        else:
            try:
                width = max(1, t.bit_width // 8)
            except ValueError:  # no fixed width (e.g. null): as nested
                width = NESTED_ROW_BYTES
            total += width * len(column)
    return total


@dataclass
class Decision:
    """What every rank decided for one run-time join (identical on every rank)."""

    broadcast: bool
    rows: int  # S's rows, summed over its senders
    nbytes: int  # S's data bytes, summed over its senders
    limit: float
    sizes_s: float  # this rank's time in the sizes round
    why: str = ""

    def summary(self, role: str) -> dict[str, Any]:
        if role == "decides":
            did = "broadcast to every rank" if self.broadcast else "hash-partitioned"
        else:
            did = "kept where it is (no exchange)" if self.broadcast else "hash-partitioned"
        return {
            "decision": "broadcast" if self.broadcast else "hash",
            "role": role,
            "this_side": did,
            "decided_by_rows": self.rows,
            "decided_by_bytes": self.nbytes,
            "limit_bytes": self.limit,
            "why": self.why,
            "sizes_s": self.sizes_s,
        }


@dataclass
class _Held:
    stage: Stage
    table: pa.Table  # with PART_COLUMN = the partition (hash % W)
    report: Any


class RuntimeJoins:
    """One rank's run-time join decisions of a plan (see module doc)."""

    def __init__(self, plan: Plan, rank: int, exchange: Exchange, query_id: str) -> None:
        self.plan, self.rank, self.exchange, self.query_id = plan, rank, exchange, query_id
        self.world = plan.world_size
        #: join id -> role ("decides": S, "stays": B) -> stage id
        self.members: dict[int, dict[str, int]] = {}
        for stage in plan.stages:
            out = stage.output
            if out.runtime_join:
                self.members.setdefault(out.runtime_join, {})[out.runtime_role] = stage.id
        self.decisions: dict[int, Decision] = {}
        self._held: dict[int, _Held] = {}
        self._kept: dict[int, pa.Table] = {}  # B stage id -> its own rows (broadcast decided)
        self._ready: dict[int, list[Stage]] = {}  # stage id -> exchanges to receive once it ran

    def handles(self, stage: Stage) -> bool:
        """True when ``stage``'s output goes through a run-time join decision."""
        return stage.output.runtime_join in self.members and len(self.members[stage.output.runtime_join]) == 2

    def spec(self, stage: Stage, planned: ExchangeSpec) -> ExchangeSpec:
        """The exchange ``stage``'s rows move by: a broadcast for a side decided small, else as planned."""
        d = self.decisions.get(stage.output.runtime_join) if self.handles(stage) else None
        if d is not None and d.broadcast and stage.output.runtime_role == "decides":
            return ExchangeSpec(
                planned.query_id, planned.exchange_id, planned.senders, planned.receivers, "broadcast"
            )
        return planned

    def ready(self, stage: Stage) -> list[Stage]:
        """The stages whose exchange this rank may receive once ``stage`` ran (plan order); a side kept in
        place is not among them (:meth:`kept` has its rows)."""
        if not self.handles(stage):
            return [stage]
        return self._ready.pop(stage.id, [])

    def stays_here(self, stage: Stage) -> bool:
        """True when ``stage``'s rows are already decided to stay on this rank (its join's side S ran first and
        goes to every rank): the worker need not compute their partition."""
        d = self.decisions.get(stage.output.runtime_join) if self.handles(stage) else None
        return d is not None and d.broadcast and stage.output.runtime_role == "stays"

    def kept(self, stage_id: int) -> pa.Table | None:
        """The rows of stage ``stage_id`` that stay on this rank with no exchange (broadcast decided), once."""
        return self._kept.pop(stage_id, None)

    def send(
        self, stage: Stage, table: pa.Table, report: Any, spec_of: Callable[[Stage], ExchangeSpec]
    ) -> None:
        """Decide (for S), then send or keep ``stage``'s output; B waits for the decision when it runs first."""
        join = stage.output.runtime_join
        held = _Held(stage, table, report)
        if stage.output.runtime_role == "decides":
            self.decisions[join] = self._decide(stage, table, spec_of(stage))
            ready = [self._move(held, spec_of)]
            if (b := self._held.pop(join, None)) is not None:  # B ran first and waited for this
                ready.insert(0, self._move(b, spec_of))
            self._ready[stage.id] = [s for s in ready if s is not None]
        elif join in self.decisions:
            moved = self._move(held, spec_of)
            self._ready[stage.id] = [moved] if moved is not None else []
        else:
            self._held[join] = held

    def _decide(self, stage: Stage, table: pa.Table, spec: ExchangeSpec) -> Decision:
        out = stage.output
        t0 = time.perf_counter()
        data = table.drop_columns([PART_COLUMN])
        rows, nbytes = data.num_rows, data_bytes(data)
        if not self.exchange.supports_sizes:
            return Decision(
                False, rows, nbytes, out.runtime_limit, 0.0, f"the {self.exchange.name} exchange has no sizes"
            )
        sizes = self.exchange.sizes(spec, rows, nbytes)
        total_rows = sum(r for r, _b in sizes.values())
        total = sum(b for _r, b in sizes.values())
        small = total <= out.runtime_limit and self.world > 1
        why = f"{total} bytes {'<=' if small else '>'} limit {out.runtime_limit:.0f}"
        return Decision(small, total_rows, total, out.runtime_limit, time.perf_counter() - t0, why)

    def _move(self, held: _Held, spec_of: Callable[[Stage], ExchangeSpec]) -> Stage | None:
        """Send ``held`` as decided; the stage to receive, or None when its rows stay here."""
        stage, report = held.stage, held.report
        d = self.decisions[stage.output.runtime_join]
        role = stage.output.runtime_role
        t0 = time.perf_counter()
        data = (
            held.table.drop_columns([PART_COLUMN]) if PART_COLUMN in held.table.column_names else held.table
        )
        if d.broadcast and role == "stays":
            self._kept[stage.id] = data
            report.bytes_to_others = 0
            report.rows_received, report.bytes_received = data.num_rows, data.nbytes
            report.runtime = d.summary(role)
            return None
        spec = self.spec(stage, spec_of(stage))
        if d.broadcast:
            addressed = {r: data for r in spec.receivers}
        else:
            parts = split_by_partition(held.table, len(stage.output.receivers))
            addressed = {r: parts[i] for i, r in enumerate(stage.output.receivers)}
            report.partition_s += time.perf_counter() - t0
        report.bytes_to_others = remote_bytes(addressed, self.rank)
        self.exchange.send(spec, addressed)
        report.runtime = d.summary(role)
        return stage
