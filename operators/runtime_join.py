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

A side's output comes from DuckDB a batch at a time and is held as received inputs are
(:func:`~squall.operators.received.gather`: in memory up to the worker's share of its budget, past it in an LZ4
Arrow file in its spill folder), its rows and data bytes counted as the batches come. A hashed side is read back
and sent a batch at a time (:meth:`~squall.exchange.base.Exchange.send_pieces`); a broadcast side is small by
the decision; a side kept in place becomes this rank's input as it is held (on disk: read from its file, which
goes once the input's last stage ran).

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from squall.exchange.base import Exchange, ExchangeSpec
from squall.operators.partition import PART_COLUMN, addressed_batches
from squall.operators.received import Received, counting, gather
from squall.operators.skew import remote_bytes
from squall.plan import Plan, Stage

#: bytes counted per row of a nested (list, struct, map) column
NESTED_ROW_BYTES = 16


def data_bytes(table: pa.Table | pa.RecordBatch) -> int:
    """Bytes of ``table``'s values, independent of chunking and row order (module doc): the bytes of a table
    are the sum of its batches'."""
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
    """A side's output, held until it moves (see module doc), with what the decision needs of it."""

    stage: Stage
    report: Any  # the side's StageReport
    kept: Received | None = None  # the rows (PART_COLUMN = hash % W, unless decided to stay before it ran)
    rows: int = 0
    nbytes: int = 0  # data bytes (module doc), PART_COLUMN left out
    sending: int = 0  # Arrow bytes it would send, PART_COLUMN left out

    def count(self, batch: pa.RecordBatch) -> None:
        data = batch.drop_columns([PART_COLUMN]) if PART_COLUMN in batch.schema.names else batch
        self.rows += batch.num_rows
        self.nbytes += data_bytes(data)
        self.sending += data.nbytes

    def close(self) -> None:
        """Let go of the rows (their file removed)."""
        if self.kept is not None:
            self.kept.close()
            self.kept = None


class RuntimeJoins:
    """One rank's run-time join decisions of a plan (see module doc)."""

    def __init__(
        self,
        plan: Plan,
        rank: int,
        exchange: Exchange,
        query_id: str,
        folder: str | None = None,
        limit: int = 0,
    ) -> None:
        self.plan, self.rank, self.exchange, self.query_id = plan, rank, exchange, query_id
        self.world = plan.world_size
        #: join id -> role ("decides": S, "stays": B) -> stage id
        self.members: dict[int, dict[str, int]] = {}
        for stage in plan.stages:
            out = stage.output
            if out.runtime_join:
                self.members.setdefault(out.runtime_join, {})[out.runtime_role] = stage.id
        self.decisions: dict[int, Decision] = {}
        #: a side's output past ``limit`` bytes is held in a file in ``folder`` (None: in memory)
        self.folder, self.limit = folder, limit
        self.held_to_disk = 0  # bytes of outputs held in ``folder``
        self._held: dict[int, _Held] = {}  # join id -> B, ran before S
        self._kept: dict[int, Received] = {}  # B stage id -> its own rows (broadcast decided)
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

    def kept(self, stage_id: int) -> Received | None:
        """The rows of stage ``stage_id`` that stay on this rank with no exchange (broadcast decided), once: the
        caller closes it (removing its file, when it has one) after the input's last stage."""
        return self._kept.pop(stage_id, None)

    def hold(
        self,
        stage: Stage,
        rows: pa.Table | pa.RecordBatchReader,
        report: Any,
        spec_of: Callable[[Stage], ExchangeSpec],
    ) -> float:
        """Hold ``stage``'s output (DuckDB's batches as they come; with PART_COLUMN unless :meth:`stays_here`),
        decide (for S), then send or keep it; B waits for the decision when it runs first, and is sent as it
        comes when S ran first and is hashed. Returns the seconds the decision and the sending took (the
        sending as it comes counts as the stage's own time)."""
        held = _Held(stage, report)
        decided = self.decisions.get(stage.output.runtime_join)
        try:
            if decided is not None and not decided.broadcast:  # nothing to wait for: hashed as it comes
                report.runtime = decided.summary(stage.output.runtime_role)
                self._hashed(stage, counting(rows, held.count), rows.schema, report, spec_of(stage))
                report.rows_out, report.bytes_out = held.rows, held.sending
                self._ready[stage.id] = [stage]
                return 0.0
            held.kept = gather(
                counting(rows, held.count), self.limit, self.folder, f"runtime-s{stage.id}", rows.schema
            )
            report.rows_out, report.bytes_out = held.rows, held.sending
            self.held_to_disk += held.sending if held.kept.on_disk else 0
            t0 = time.perf_counter()
            self._send(held, spec_of)
        except BaseException:
            held.close()
            self.close()
            raise
        return time.perf_counter() - t0

    def close(self) -> None:
        """Let go of every held or kept output (a failed query: their files removed)."""
        for held in self._held.values():
            held.close()
        for kept in self._kept.values():
            kept.close()
        self._held.clear()
        self._kept.clear()

    def _send(self, held: _Held, spec_of: Callable[[Stage], ExchangeSpec]) -> None:
        stage = held.stage
        join = stage.output.runtime_join
        if stage.output.runtime_role == "decides":
            self.decisions[join] = self._decide(held, spec_of(stage))
            ready = [self._move(held, spec_of)]
            if (b := self._held.pop(join, None)) is not None:  # B ran first and waited for this
                ready.insert(0, self._move(b, spec_of))
            self._ready[stage.id] = [s for s in ready if s is not None]
        elif join in self.decisions:
            moved = self._move(held, spec_of)
            self._ready[stage.id] = [moved] if moved is not None else []
        else:
            self._held[join] = held

    def _decide(self, held: _Held, spec: ExchangeSpec) -> Decision:
        out = held.stage.output
        t0 = time.perf_counter()
        rows, nbytes = held.rows, held.nbytes
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
        """Send ``held`` as decided (its rows let go of once sent); the stage to receive, or None when its rows
        stay here."""
        stage, report, kept = held.stage, held.report, held.kept
        assert kept is not None
        d = self.decisions[stage.output.runtime_join]
        role = stage.output.runtime_role
        report.runtime = d.summary(role)
        if d.broadcast and role == "stays":
            self._kept[stage.id] = kept.without(PART_COLUMN)
            held.kept = None  # the worker's input now: it closes it
            report.bytes_to_others = 0
            report.rows_received, report.bytes_received = held.rows, held.sending
            return None
        spec = self.spec(stage, spec_of(stage))
        try:
            if d.broadcast:  # S: at most runtime_limit data bytes, by the decision
                whole = held.kept = kept.without(PART_COLUMN)  # closed below, its file with it
                data = whole.data if isinstance(whole.data, pa.Table) else whole.data.to_table()
                addressed = {r: data for r in spec.receivers}
                report.bytes_to_others = remote_bytes(addressed, self.rank)
                self.exchange.send(spec, addressed)
            else:
                self._hashed(stage, kept.batches(), kept.data.schema, report, spec)
        finally:
            held.close()
        return stage

    def _hashed(
        self,
        stage: Stage,
        batches: Iterable[pa.RecordBatch],
        schema: pa.Schema,
        report: Any,
        spec: ExchangeSpec,
    ) -> None:
        """Send ``batches`` (with PART_COLUMN) to their receivers a batch at a time (``send_pieces``)."""
        report.bytes_to_others = 0
        pieces = addressed_batches(batches, stage.output.receivers, self.rank, report)
        self.exchange.send_pieces(spec, schema.remove(schema.get_field_index(PART_COLUMN)), pieces)
