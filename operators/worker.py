"""The worker: runs every stage of a plan for one rank (SPMD).

Lifecycle of one query on one rank: open the exchange endpoint from the
driver's config → for each stage in plan order: if this rank runs the stage,
read its inputs (scan splits, received exchange data), run the stage's DuckDB
SQL in a sandbox, partition the output and send it; then, if this rank
receives that stage's output, receive it now (bulk-synchronous, see
``squall.exchange.base``); before each stage ask the exchange whether the query
was aborted (``Exchange.aborted``) and stop with ExchangeAborted if so → rank 0 returns the result of the last stage →
close the endpoint. Per-stage counters come back in :class:`WorkerReport`.

An exchange whose ``aborted()`` is cheap (``abort_poll_s`` set: the local exchange, one ``stat``) is also watched
while a stage runs: once the query is aborted, the sandboxes' DuckDB is interrupted, so a cancel stops a long
stage within that interval instead of at its end (:func:`abort_watch`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import duckdb
import pyarrow as pa
import pyarrow.compute

from squall.errors import QueryRuntimeError
from squall.exchange.base import Exchange, ExchangeAborted, ExchangeSpec
from squall.operators.duck import ParquetView, Sandbox, duck_type, file_read_select, ident, interrupted
from squall.operators.faults import after_write, before_stage, faults_from_env, scan_delay
from squall.operators.memory import (
    PeakMemory,
    SpillWatch,
    budget_exceeded,
    disk_full,
    machine_out_of_memory,
    out_of_disk,
    out_of_spill,
    spill_full,
)
from squall.operators.partition import (
    BATCH_ROWS,
    NULL_COLUMN,
    PART_COLUMN,
    RANGE_COLUMN,
    addressed_batches,
    grouped_batches,
    split_range_sql,
)
from squall.operators.rangepart import send_by_range
from squall.operators.received import Received, batch_stream, gather, receive_limit, receive_within
from squall.operators.runtime_join import RuntimeJoins
from squall.operators.sandbox_group import allowed_files
from squall.operators.scan import key_bound_sql, read_scan, scan_schema
from squall.operators.sinks import Sink, sink_for
from squall.operators.skew import SkewExchanges
from squall.operators.skip_record import ProbeView, probe_view, record_native, record_table, view_name
from squall.operators.stage_sandboxes import StageSandboxes
from squall.operators.steal import native_files, split_reader, steal_scan
from squall.operators.storage import Storage, scheme_of, storage_for
from squall.operators.write import write_part
from squall.plan import ExchangeInput, Plan, ScanInput, Stage

if TYPE_CHECKING:
    import pyarrow.dataset as ds

# DuckDB errors caused by the data or the query's own logic: the user's to fix.
USER_RUNTIME = (  # DuckDB errors that are the query's fault (a bad cast, …), not the engine's
    duckdb.ConversionException,
    duckdb.OutOfRangeException,
    duckdb.InvalidInputException,
    duckdb.BinderException,
    duckdb.NotImplementedException,
    duckdb.TypeMismatchException,
    duckdb.OutOfMemoryException,
)


@dataclass
class StageReport:
    stage: int
    rows_scanned: int = 0
    bytes_scanned: int = 0
    rows_in: int = 0
    rows_out: int = 0
    bytes_out: int = 0
    scan_s: float = 0.0
    compute_s: float = 0.0
    send_s: float = 0.0
    receive_s: float = 0.0
    partition_s: float = 0.0  # splitting an output by receiver (counted in neither compute_s nor send_s)
    rows_received: int = 0
    bytes_received: int = 0
    sampled: int = 0  # keys this rank sampled for a range output's splitters
    bytes_to_others: int = 0  # Arrow bytes of the rows this rank sent to other ranks (crossed the network)
    skew: dict[str, Any] = field(default_factory=dict)  # a skew-aware exchange's summary (operators/skew.py)
    #: a run-time join decision's summary (operators/runtime_join.py)
    runtime: dict[str, Any] = field(default_factory=dict)
    #: join filters applied here: label → [rows before (the scan's row groups), rows after] (see Stage.join_filters)
    join_filters: dict[str, list[int]] = field(default_factory=dict)
    threads: int = 0  # DuckDB threads it ran with here (more than the rank's share when other ranks wait)

    @property
    def time_s(self) -> float:
        """The stage's seconds on this rank: its parts, which do not overlap."""
        return self.scan_s + self.compute_s + self.partition_s + self.send_s + self.receive_s


@dataclass
class WorkerReport:
    rank: int
    stages: list[StageReport] = field(default_factory=list)
    storage_requests: dict[str, int] = field(default_factory=dict)
    exchange: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    steals: list[dict[str, Any]] = field(default_factory=list)  # one per stealing scan (operators/steal.py)
    #: scan name -> the predicate cache probe's outcome (squall.operators.skip_record)
    skipping: dict[str, Any] = field(default_factory=dict)
    #: a write plan's part on this rank: files, rows, bytes written and seconds spent (operators/write.py)
    written: dict[str, Any] = field(default_factory=dict)
    #: this rank's memory: ``budget_bytes`` (None: none set), ``peak_bytes`` (resident, the process's peak
    #: during the query), ``spilled_bytes`` (the most its spill folder held) and ``received_to_disk_bytes``
    #: (received inputs written there, not held: operators/received.py), ``held_to_disk_bytes`` (outputs held
    #: there until a run-time join's or skew-aware exchange's decision or a range output's sample) — see
    #: operators/memory.py
    memory: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "written": self.written,
            "elapsed_s": self.elapsed_s,
            "storage_requests": self.storage_requests,
            "exchange": self.exchange,
            "stages": [dict(vars(s), time_s=s.time_s) for s in self.stages],
            "steals": self.steals,
            "skipping": self.skipping,
            "memory": self.memory,
        }


def _count(db: Sandbox, sql: str) -> int:
    got = db.query(f"SELECT count(*) AS n FROM ({sql}) AS t")
    return int(got.column(0)[0].as_py())


def exchange_spec(query_id: str, stage: Stage) -> ExchangeSpec:
    kind = "hash" if stage.output.kind == "range" else stage.output.kind  # range: partitioned by key range
    return ExchangeSpec(query_id, stage.id, stage.output.senders, stage.output.receivers, kind)


class Worker:
    """Runs a plan for one rank (see module doc)."""

    def __init__(
        self,
        plan: Plan,
        rank: int,
        exchange: Exchange,
        query_id: str,
        *,
        threads: int | None = None,
        storage_options: dict[str, Any] | None = None,
        on_stage: Callable[[int], None] | None = None,
        sandbox_options: dict[str, Any] | None = None,
        attempt: int = 0,
        memory_budget: int | None = None,
        sandbox_group: str = "",
        cores: int | None = None,
    ) -> None:
        self.plan = plan
        self.rank = rank
        self.attempt = attempt  # this rank's attempt (a re-invoked Lambda rank): in a write's file names
        self.exchange = exchange
        self.query_id = query_id
        self.threads = threads or max(1, (os.cpu_count() or 1) // max(plan.world_size, 1))
        #: the cores this query's ranks share (all on this machine: the local platform); a stage on fewer ranks
        #: takes the waiting ranks' share too (operators/stage_sandboxes.py). None: every stage takes ``threads``
        self.cores = cores
        self.storage_options = storage_options or {}
        self.on_stage = on_stage
        #: memory_limit, temp_directory, max_temp_directory_size (operators/memory.py); ``reuse``: keep the DuckDB
        #: instance for the next query (default: unless the temp folder is this query's own, as on Lambda)
        self.sandbox_options = dict(sandbox_options or {})
        self.memory_budget = memory_budget  # bytes this rank may use at its peak (None: none set)
        # the next query over the same files reuses this process's locked DuckDB instance; not with a
        # temp directory of this query's own (Lambda: removed after the query, the instance would outlive it)
        self.reuse_sandbox = bool(
            self.sandbox_options.pop("reuse", "temp_directory" not in self.sandbox_options)
        )
        #: the connection whose queries' files a kept sandbox also allows (operators/sandbox_group.py)
        self.sandbox_group = sandbox_group if self.reuse_sandbox else ""
        self.native_scans = bool(self.storage_options.get("native_scans", True))
        self.faults = faults_from_env()
        self._storages: dict[str, Storage] = {}
        self._sink: Sink | None = None
        self._probes: dict[str, ProbeView] = {}  # predicate cache probes of native scans, by scan name
        self._views: dict[str, ParquetView] = {}  # the native views of this rank's scans, by scan name
        self._skipping: dict[str, Any] = {}
        #: where received inputs, kept scans and skew-aware exchanges' held output go past ``_held_limit`` bytes:
        #: the spill folder (None: no budget, all held; operators/received.py)
        self._disk: str | None = (
            self.sandbox_options.get("temp_directory") if memory_budget is not None else None
        )
        self._held_limit = receive_limit(memory_budget) if memory_budget is not None and self._disk else 0
        self._skew = SkewExchanges(plan, rank, exchange, query_id, self._disk, self._held_limit)
        self._runtime = RuntimeJoins(plan, rank, exchange, query_id, self._disk, self._held_limit)
        self._guard = SpillWatch(None)  # run()'s: the spill folder's size and the machine's memory

    def _storage(self, path: str) -> Storage:
        scheme = scheme_of(path)
        if scheme not in self._storages:
            self._storages[scheme] = storage_for(path, self.storage_options)
        return self._storages[scheme]

    def run(self) -> tuple[pa.Table | None, WorkerReport]:
        """Run every stage; returns (result on rank 0 else None, report)."""
        start = time.perf_counter()
        report = WorkerReport(self.rank)
        received: dict[int, pa.Table | ds.Dataset] = {}
        result: pa.Table | None = None
        views, files = self.sandbox_files()
        self._views = views
        peak = PeakMemory()
        peak.reset()
        self._report = report
        self._probes = {
            inp.name: probe
            for inp in self._scans()
            if inp.name in views and not inp.files and (probe := probe_view(inp, self.rank))
        }
        probes = {view_name(name): probe for name, probe in self._probes.items()}
        self._on_disk: dict[int, Received] = {}  # received inputs written to disk (operators/received.py)
        self._received_to_disk = 0
        self._held_to_disk = 0  # range outputs held on disk for their sample
        with StageSandboxes(
            self.threads,
            self.cores,
            parquet={**views, **probes},
            files=files,
            reuse=self.reuse_sandbox,
            **self.sandbox_options,
        ) as sandboxes:
            with (
                abort_watch(self.exchange, sandboxes.interrupt),
                SpillWatch(
                    self.sandbox_options.get("temp_directory"),
                    budget=self.memory_budget,
                    stop=sandboxes.interrupt,
                ) as spill,
            ):
                self._guard = spill
                try:
                    self._run_stages(sandboxes, received, report)
                finally:
                    for input_file in self._on_disk.values():
                        input_file.close()
                    self._skew.close()
                    self._runtime.close()
            result = self._result
        report.memory = {
            "budget_bytes": self.memory_budget,
            "peak_bytes": peak.peak(),
            "spilled_bytes": spill.most,
            "received_to_disk_bytes": self._received_to_disk,
            "held_to_disk_bytes": self._held_to_disk + self._runtime.held_to_disk + self._skew.held_to_disk,
        }
        report.skipping = self._skipping
        report.elapsed_s = time.perf_counter() - start
        for storage in self._storages.values():
            for kind, n in storage.requests().items():
                report.storage_requests[kind] = report.storage_requests.get(kind, 0) + n
        report.exchange = self.exchange.stats().to_dict()
        return result, report

    def sandbox_files(self) -> tuple[dict[str, ParquetView], list[str]]:
        """The native views of this rank's scans, by scan name, and the files its one sandbox for the query
        allows: every rank's splits of the scans it takes part in. A stealing scan reads any rank's splits; for
        the others the wider list makes the sandbox the same on every rank and W of a query, so a worker finds
        the kept DuckDB instance of any earlier rank's run; with a sandbox group, also the files of that connection's
        earlier queries here (operators/sandbox_group.py: its next query reuses the instance)."""
        scans = [inp for stage in self.plan.stages if self.rank in stage.ranks
                 for inp in stage.inputs if isinstance(inp, ScanInput)]  # fmt: skip
        views = {inp.name: view for inp in scans if not inp.steal and (view := self._native(inp)) is not None}
        native = [inp for inp in scans if inp.name in views or (inp.steal and self._native_ok(inp))]
        return views, allowed_files(self.sandbox_group, {f for inp in native for f in native_files(inp)})

    def _run_stages(
        self,
        sandboxes: StageSandboxes,
        received: dict[int, pa.Table | ds.Dataset],
        report: WorkerReport,
    ) -> None:
        self._result = None
        reports: dict[int, StageReport] = {}
        # an exchange may feed several stages (a join's build side and its join filter): keep it until its last
        self._last_use = {
            inp.stage: stage.id
            for stage in self.plan.stages
            for inp in stage.inputs
            if isinstance(inp, ExchangeInput)
        }
        for stage in self.plan.stages:
            sr = reports[stage.id] = StageReport(stage.id)
            report.stages.append(sr)
            if self.faults:
                before_stage(self.faults, self.rank, stage.id, stop=self.exchange.aborted)
            if self.exchange.aborted():  # cancelled or another rank failed: stop between stages
                raise ExchangeAborted(f"query aborted before stage {stage.id}")
            try:
                self._stage_and_receive(stage, sandboxes, received, reports)
            except Exception as exc:
                said = self._one_line(exc, stage)
                if said is exc:
                    raise
                raise said from None
            if self._guard.over:  # stopped past its budget where nothing could be interrupted
                raise self._one_line(MemoryError(), stage)
            if self.on_stage is not None:
                self.on_stage(stage.id)

    def _one_line(self, exc: Exception, stage: Stage) -> Exception:
        """The error a stage's failure raises: one line for running out of memory (the budget, or the machine
        past it: the guard stopped it) or disk; ``exc`` itself otherwise."""
        if self._guard.over and (interrupted(exc) or isinstance(exc, MemoryError)):
            assert self.memory_budget is not None
            return QueryRuntimeError(
                machine_out_of_memory(stage.id, self.rank, self.memory_budget, self._guard.over)
            )
        folder = self.sandbox_options.get("temp_directory") or "the temp folder"
        if isinstance(exc, duckdb.OutOfMemoryException) and spill_full(exc):
            limit = str(self.sandbox_options.get("max_temp_directory_size", "its limit"))
            return QueryRuntimeError(out_of_spill(stage.id, self.rank, folder, limit))
        if isinstance(exc, (duckdb.OutOfMemoryException, MemoryError)):
            return QueryRuntimeError(budget_exceeded(exc, stage.id, self.rank, self.memory_budget))
        if isinstance(exc, (OSError, duckdb.IOException)) and disk_full(exc):
            return QueryRuntimeError(out_of_disk(stage.id, self.rank, folder))
        return exc

    def _stage_and_receive(
        self,
        stage: Stage,
        sandboxes: StageSandboxes,
        received: dict[int, pa.Table | ds.Dataset],
        reports: dict[int, StageReport],
    ) -> None:
        if self.rank in stage.ranks:
            sr = reports[stage.id]
            sr.threads = sandboxes.threads_for(len(stage.ranks), self.plan.world_size)
            table = self._run_stage(stage, sandboxes.sandbox(sr.threads), received, sr)
            if stage.output.kind == "result":
                self._result = table  # a write plan's: the manifest of the files this rank wrote
        if stage.output.kind != "result" and self.rank in stage.output.receivers:
            # a skew-aware group's exchanges are received together, after its last member was sent;
            # a run-time join's after its decision (a side kept in place is not received at all)
            waiting = self._runtime.ready(stage) if self._runtime.handles(stage) else self._skew.ready(stage)
            for ready in waiting:
                rr = reports[ready.id]
                t0 = time.perf_counter()
                spec = self._runtime.spec(ready, exchange_spec(self.query_id, ready))
                got = self._receive(spec)
                rr.receive_s += time.perf_counter() - t0
                rr.rows_received, rr.bytes_received = got.rows, got.nbytes
                received[ready.id] = got.data
                if got.on_disk:
                    self._on_disk[ready.id] = got
                    self._received_to_disk += got.nbytes

    def _stream(self, stage: Stage, db: Sandbox, sql: str, sr: StageReport) -> None:
        """Run a hash stage's ``sql`` (its rows with their receiver in PART_COLUMN) and send it a batch at a time."""
        receivers = stage.output.receivers
        t0 = time.perf_counter()

        def counted(pieces: Iterator[dict[int, pa.Table]]) -> Iterator[dict[int, pa.Table]]:
            for piece in pieces:
                sr.rows_out += sum(part.num_rows for part in piece.values())
                sr.bytes_out += sum(part.nbytes for part in piece.values())
                yield piece

        with db.batches(sql, BATCH_ROWS) as batches:
            schema = batches.schema.remove(batches.schema.get_field_index(PART_COLUMN))
            pieces = counted(addressed_batches(batches, receivers, self.rank, sr))
            self.exchange.send_pieces(exchange_spec(self.query_id, stage), schema, pieces)
        sr.compute_s += time.perf_counter() - t0 - sr.partition_s

    def _send_whole(self, stage: Stage, db: Sandbox, sr: StageReport) -> None:
        """A broadcast or gather stage's output, read from DuckDB and handed to the exchange a batch at a time
        (an exchange that writes as it goes never holds it whole)."""
        receivers = stage.output.receivers
        others = sum(r != self.rank for r in receivers)
        t0 = time.perf_counter()

        def addressed(batches: pa.RecordBatchReader) -> Iterator[dict[int, pa.Table]]:
            for batch in batches:
                table = pa.Table.from_batches([batch])
                sr.rows_out += table.num_rows
                sr.bytes_out += table.nbytes
                sr.bytes_to_others += table.nbytes * others
                yield dict.fromkeys(receivers, table)

        with db.batches(stage.sql, BATCH_ROWS) as batches:
            self.exchange.send_pieces(exchange_spec(self.query_id, stage), batches.schema, addressed(batches))
        sr.compute_s += time.perf_counter() - t0

    def _send_by_range(self, stage: Stage, db: Sandbox, sr: StageReport) -> None:
        """A range stage's output, held (on disk past the budget's share) for its sample, then sent by key range a
        batch at a time (operators/rangepart.py)."""
        t0 = time.perf_counter()
        with db.batches(stage.sql, BATCH_ROWS) as batches:
            rows = gather(batches, self._held_limit, self._disk, f"range-s{stage.id}", batches.schema)
        self._held_to_disk += rows.nbytes if rows.on_disk else 0
        try:
            sr.rows_out, sr.bytes_out = rows.rows, rows.nbytes
            t1 = time.perf_counter()
            sr.compute_s += t1 - t0
            spec = exchange_spec(self.query_id, stage)
            sr.sampled = send_by_range(db, rows, stage.output, self.exchange, spec, sr)
            sr.send_s += time.perf_counter() - t1 - sr.partition_s
        finally:
            rows.close()

    def _rows_before(self, db: Sandbox, stage: Stage, pre_sql: str, kept_rows: dict[str, int]) -> int:
        """The rows a join filter reads: its scan's row groups on this rank (from the footers: counting the
        rows after the scan's own filters would read the whole scan a second time, which is what the filter
        saves; DuckDB skips the row groups the kept keys rule out), or an earlier filter's kept rows; a stealing
        scan's rows after its own filters, counted."""
        for inp in stage.inputs:
            if isinstance(inp, ScanInput) and f'"{inp.name}"' in pre_sql:
                if inp.steal:  # the splits it reads are claimed as it goes
                    break
                return sum(s.rows for s in inp.splits_for(self.rank))
        for name, rows in kept_rows.items():
            if f'"{name}"' in pre_sql:
                return rows
        return _count(db, pre_sql)

    def _kept(self, db: Sandbox, sql: str, prefix: str) -> Received:
        """The rows of ``sql`` (a scan a join filter kept): past the budget's share on disk, as received inputs."""
        if self._disk is None:
            table = db.query(sql)
            return Received(table, table.num_rows, table.nbytes)
        with db.batches(sql, BATCH_ROWS) as rows:
            return gather(rows, self._held_limit, self._disk, prefix, rows.schema)

    def _receive(self, spec: ExchangeSpec) -> Received:
        """``spec``'s rows for this rank: held within the budget's share, past it on disk (operators/received.py)."""
        if self._disk is None:
            got = self.exchange.receive(spec)
            return Received(got, got.num_rows, got.nbytes)
        in_place = self.exchange.receive_in_place(spec, self._held_limit)  # read where the exchange keeps it
        if in_place is not None:
            data, rows, nbytes = in_place
            return Received(data, rows, nbytes, on_disk=True)
        return receive_within(self.exchange, spec, self._held_limit, self._disk)

    def _write(self, stage: Stage, db: Sandbox) -> pa.Table:
        """A write plan's result stage: its rows stream from the stage's SQL into this rank's staged files
        (never all in memory at once); the stage's result is their manifest."""
        assert self.plan.write is not None
        spec, t0 = self.plan.write, time.perf_counter()
        if self._sink is None:
            self._sink = sink_for(spec.staging, self.storage_options)
        named = ", ".join(
            f"{ident(c)} AS {ident(n)}" for (c, _t), n in zip(stage.columns, self.plan.result_names)
        )
        rows = db.relation(f"SELECT {named} FROM ({stage.sql}) AS t").arrow()  # a RecordBatchReader
        manifest, written = write_part(
            rows, spec, self._sink, self.query_id, self.rank, self.attempt,
            first_rank=self.rank == min(stage.ranks), threads=self.threads,
            temp_dir=self.sandbox_options.get("temp_directory"),
        )  # fmt: skip
        self._report.written = {
            "files": manifest.num_rows,
            "rows": written,
            "bytes": int(pa.compute.sum(manifest.column("bytes")).as_py() or 0),
            "write_s": time.perf_counter() - t0,
            "requests": self._sink.requests(),
        }
        if self.faults:
            after_write(self.faults, self.rank)
        return manifest

    def _native_ok(self, inp: ScanInput) -> bool:
        """Whether DuckDB may read ``inp``'s files itself (local Parquet, native scans on)."""
        splits = [s for per in inp.splits for s in per]
        return (
            self.native_scans
            and inp.scan == "parquet"
            and not inp.files  # files read through a FileRead (partition values, missing columns): Arrow path
            and all(scheme_of(s.path) == "file" for s in splits)
        )

    def _file_selects(self, inp: ScanInput) -> tuple[tuple[str, str], ...] | None:
        """Per file read through a FileRead, the native view's select list (renamed and missing columns,
        partition values, casts to the scan's types); None when DuckDB cannot read them so (deletes, a key
        range, a type without a plain DuckDB name)."""
        if not inp.files:
            return ()
        if inp.key_column or any(f.position_deletes or f.deleted_rows for f in inp.files):
            return None
        types = [duck_type(f.type) for f in scan_schema(inp)]
        if any(t is None for t in types):
            return None
        return tuple(
            (
                os.path.abspath(f.path.removeprefix("file://")),
                file_read_select(inp.columns, cast(list[str], types), dict(f.columns), dict(f.constants)),
            )
            for f in inp.files
        )

    def _steal(self, inp: ScanInput, stage: Stage, db: Sandbox, sr: StageReport) -> pa.Table:
        """The stealing scan (``squall.operators.steal``): this rank's claimed and stolen splits."""
        delay = scan_delay(self.faults, self.rank, stage.id) if self.faults else 0.0
        native = any(inp.splits) and self._native_ok(inp)
        read = split_reader(inp, db.query if native else None, self._storage, delay)
        before = sum(s.bytes_read for s in self._storages.values())
        tables, rep = steal_scan(inp, stage.id, stage.ranks, self.rank, self.exchange, self.query_id, read)
        self._report.steals.append(rep.to_dict())
        sr.rows_scanned += rep.rows
        sr.bytes_scanned += (
            rep.nbytes if native else sum(s.bytes_read for s in self._storages.values()) - before
        )
        if not tables:
            return scan_schema(inp).empty_table()
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _scans(self) -> list[ScanInput]:
        return [inp for stage in self.plan.stages for inp in stage.inputs if isinstance(inp, ScanInput)]

    def _native(self, inp: ScanInput) -> ParquetView | None:
        """A DuckDB-native view for local Parquet splits (fast path), else None."""
        splits = inp.splits_for(self.rank)
        if (
            not self.native_scans
            or inp.scan != "parquet"
            or not splits
            or any(scheme_of(s.path) != "file" for s in splits)
        ):
            return None
        selects = self._file_selects(inp)
        if selects is None:
            return None
        parts = [
            (os.path.abspath(s.path.removeprefix("file://")), () if s.whole_file else s.row_ranges)
            for s in splits
        ]
        bounds = inp.bounds_for(self.rank)
        where = key_bound_sql(ident(inp.key_column), bounds) if bounds is not None else ""
        return ParquetView(inp.columns, tuple(parts), where, selects)

    def _run_stage(
        self,
        stage: Stage,
        db: Sandbox,
        received: dict[int, pa.Table | ds.Dataset],
        sr: StageReport,
    ) -> pa.Table | None:
        inputs: dict[str, pa.Table | ds.Dataset] = {}
        done: list[Received] = []  # inputs on disk whose last stage this is
        last_read = {i.stage: i.name for i in stage.inputs if isinstance(i, ExchangeInput)}
        t0 = time.perf_counter()
        for inp in stage.inputs:
            if inp.name in self._views:
                assert isinstance(inp, ScanInput)
                splits = inp.splits_for(self.rank)
                sr.rows_scanned += sum(s.rows for s in splits)
                sr.bytes_scanned += sum(s.nbytes for s in splits)
                if self.faults and (delay := scan_delay(self.faults, self.rank, stage.id)):
                    time.sleep(delay * sum(len(s.row_groups) for s in splits))
                if inp.name in self._probes:
                    self._skipping[inp.name] = record_native(db, inp, self._probes[inp.name])
                continue
            if isinstance(inp, ScanInput) and inp.steal:
                table = self._steal(inp, stage, db, sr)
            elif isinstance(inp, ScanInput):
                before = sum(s.bytes_read for s in self._storages.values())
                if self.faults and (delay := scan_delay(self.faults, self.rank, stage.id)):
                    time.sleep(delay * sum(len(s.row_groups) for s in inp.splits_for(self.rank)))
                table = read_scan(inp, self.rank, self._storage)
                sr.bytes_scanned += sum(s.bytes_read for s in self._storages.values()) - before
                sr.rows_scanned += table.num_rows
                if (probed := record_table(db, inp, self.rank, table)) is not None:
                    self._skipping[inp.name] = probed
            else:
                assert isinstance(inp, ExchangeInput)
                if inp.stage not in received and (kept := self._runtime.kept(inp.stage)) is not None:
                    received[inp.stage] = kept.data  # a run-time join's side that stayed where it was made
                    if kept.on_disk:
                        self._on_disk[inp.stage] = kept
                table = received[inp.stage]
                if (
                    last_read[inp.stage] != inp.name
                ):  # read again below under other names (ExchangeInput.columns)
                    inputs[inp.name] = table
                    continue
                if self._last_use.get(inp.stage) == stage.id:
                    del received[inp.stage]
                    if inp.stage in self._on_disk:  # its file goes once the stage ran
                        done.append(self._on_disk.pop(inp.stage))
            sr.rows_in += table.num_rows if isinstance(table, pa.Table) else table.count_rows()
            inputs[inp.name] = table
        t1 = time.perf_counter()
        sr.scan_s += t1 - t0
        output = stage.output
        registered: list[str] = []  # what the finally removes: a copy into DuckDB (loaded) or an Arrow view
        loaded: list[str] = []

        renamed = {i.name: i.columns for i in stage.inputs if isinstance(i, ExchangeInput) and i.columns}

        def expose(name: str, data: pa.Table | ds.Dataset) -> None:
            names = renamed.get(name, ())
            if isinstance(data, pa.Table):
                db.register(name, data.rename_columns(list(names)) if names else data)
            else:  # on disk: a table of DuckDB's own, with statistics its optimizer can use
                db.load(name, batch_stream(data, names))
                loaded.append(name)
            registered.append(name)

        try:
            for name, table in inputs.items():
                expose(name, table)
            kept_rows: dict[str, int] = {}
            for label, pre_sql, post_sql, name in stage.join_filters:  # see Stage.join_filters
                kept = self._kept(db, post_sql, f"kept-s{stage.id}")
                if kept.on_disk:
                    done.append(kept)
                expose(name, kept.data)
                kept_rows[name] = kept.rows
                sr.join_filters[label] = [self._rows_before(db, stage, pre_sql, kept_rows), kept.rows]
            # the filtered scans' reading is the stage's work (the paths below time their own)
            if stage.join_filters:
                now = time.perf_counter()
                sr.compute_s += now - t1
                t1 = now
            if self._runtime.handles(stage) and self.rank in output.senders:
                # a run-time join's side: held a batch at a time (on disk past the budget's share) until the
                # decision, then broadcast, hashed or kept here (operators/runtime_join.py)
                stays = self._runtime.stays_here(stage)
                sql = (
                    stage.sql
                    if stays
                    else f"SELECT *, ({output.partition_sql}) AS {PART_COLUMN} FROM ({stage.sql}) AS t"
                )
                t = time.perf_counter()
                with db.batches(sql, BATCH_ROWS) as batches:
                    sent_s = self._runtime.hold(stage, batches, sr, lambda s: exchange_spec(self.query_id, s))
                sr.send_s += sent_s
                sr.compute_s += time.perf_counter() - t - sent_s
                return None
            if output.kind == "hash" and not self._runtime.stays_here(stage):
                key = f", ({output.range_sql}) AS {RANGE_COLUMN}" if output.range_sql else ""
                key += f", ({output.null_sql}) AS {NULL_COLUMN}" if output.null_sql else ""
                part = (
                    split_range_sql(output.keys[0], output.split_ranges)
                    if output.split_ranges
                    else output.partition_sql
                )
                sql = f"SELECT *, ({part}) AS {PART_COLUMN}{key} FROM ({stage.sql}) AS t"
                if self._skew.handles(stage) and self.rank in output.senders:
                    # the column: the full key hash; held (a batch at a time, on disk past the budget's share)
                    # until the histogram round (operators/skew.py)
                    t = time.perf_counter()
                    with db.batches(sql, BATCH_ROWS) as batches:
                        sent_s = self._skew.hold(
                            stage, batches, sr, lambda s: exchange_spec(self.query_id, s)
                        )
                    sr.send_s += sent_s  # the histogram round and the sending: after the group's last member
                    sr.compute_s += time.perf_counter() - t - sent_s
                    return None
                if self._skew.handles(stage):  # not a sender: nothing to hold
                    table = db.query(sql)
                elif self.rank in output.senders and not self._runtime.handles(stage):
                    # read a batch at a time, each batch split and handed to the exchange as it comes: an
                    # exchange that writes as it goes (local) never holds the output (partition_s: the
                    # splitting; the writing counts in compute_s, as it overlaps DuckDB's work)
                    self._stream(stage, db, sql, sr)
                    return None
                else:  # read a batch at a time, grouped by receiver as it comes: held once, not twice
                    with db.batches(sql, BATCH_ROWS) as batches:
                        table = grouped_batches(batches, len(output.receivers))
            elif output.kind == "range" and self.rank in output.senders:
                self._send_by_range(stage, db, sr)
                return None
            elif output.kind in ("broadcast", "gather") and self.rank in output.senders:
                self._send_whole(stage, db, sr)
                return None
            else:
                table = (
                    db.query(stage.sql)
                    if self.plan.write is None or output.kind != "result"
                    else self._write(stage, db)
                )
        except duckdb.OutOfMemoryException:
            raise  # said with the budget by _run_stages
        except USER_RUNTIME as err:
            raise QueryRuntimeError(str(err).splitlines()[0]) from None
        finally:
            for name in registered:
                db.drop(name) if name in loaded else db.unregister(name)
            for input_file in done:
                input_file.close()
        t2 = time.perf_counter()
        sr.compute_s += t2 - t1
        sr.rows_out = (
            table.num_rows
            if self.plan.write is None or output.kind != "result"
            else self._report.written["rows"]
        )
        sr.bytes_out = table.nbytes
        # every sender's output went to the exchange as it came (above): what is left is a result, or the
        # output of a rank that runs the stage but sends nothing
        assert output.kind == "result" or self.rank not in output.senders
        return table


@contextmanager
def abort_watch(exchange: Exchange, interrupt: Callable[[], None]) -> Iterator[None]:
    """While the block runs, interrupt the rank's sandboxes (``interrupt``) every ``exchange.abort_poll_s`` seconds
    once the query is aborted (a cancel, another rank's failure); the interrupted statement's error becomes
    ExchangeAborted. No watch when the exchange sets no ``abort_poll_s`` (asking it costs a request)."""
    poll = getattr(exchange, "abort_poll_s", None)
    if not poll:
        yield
        return
    done = threading.Event()
    seen: list[bool] = []

    def watch() -> None:
        while not done.wait(poll):
            try:
                if exchange.aborted():
                    seen.append(True)
                    interrupt()
            except Exception:  # the watch is a shortcut: the stage boundaries still check
                return

    thread = threading.Thread(target=watch, name="squall-abort-watch", daemon=True)
    thread.start()
    try:
        yield
    except duckdb.InterruptException:
        if not seen:
            raise
        raise ExchangeAborted("query aborted while a stage ran") from None
    finally:
        done.set()
        thread.join()
