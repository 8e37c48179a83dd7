"""The distributed plan: stages separated by exchanges. Immutable; JSON round-trips.

A plan is one program every worker runs with its own rank (SPMD). Stages are
in execution order; a stage reads its inputs (scan splits or an upstream
stage's exchange), runs its DuckDB SQL over them, and hands the result to its
output: a hash exchange, a broadcast, a gather to rank 0, or — for the last
stage — the query result on rank 0.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from typing import Any

PLAN_FORMAT = 1


@dataclass(frozen=True)
class Split:
    """Row groups of one Parquet file; ``row_ranges`` are the same rows as [start, end) row numbers."""

    path: str
    row_groups: tuple[int, ...]
    row_ranges: tuple[tuple[int, int], ...] = ()
    rows: int = 0
    nbytes: int = 0  # compressed bytes of the scanned column chunks
    whole_file: bool = False  # the split is every row group of its file (no row-range filter needed)


@dataclass(frozen=True)
class FileRead:
    """How a worker reads one data file of a table whose files are not all read as written.

    A scan's ``columns`` name *table* columns; for a file listed in ``ScanInput.files`` they are
    found through this entry (a file not listed holds every table column under its own name):

    - ``columns``: (table column, column in the file) for the columns whose name in the file differs
      (Iceberg field ids, Delta column mapping); ``""`` when the file lacks the column (schema
      evolution: NULLs of the table's type);
    - ``constants``: (table column, value as text, or None for NULL) for columns whose value comes
      from the file's partition (hive ``key=value`` folders, Iceberg identity partitions, Delta
      partition values), cast to the table's type;
    - ``position_deletes``: Iceberg position-delete files (Parquet with ``file_path``, ``pos``) whose
      rows naming this file are deleted;
    - ``deleted_rows``: row positions deleted from this file (Delta deletion vectors), base64 of
      little-endian int64s in ascending order.

    Values read are cast to the scan's schema (safe widening: INT32 to INT64, FLOAT to DOUBLE, …).
    """

    path: str
    columns: tuple[tuple[str, str], ...] = ()
    constants: tuple[tuple[str, str | None], ...] = ()
    position_deletes: tuple[str, ...] = ()
    deleted_rows: str = ""

    @staticmethod
    def from_dict(d: dict[str, Any]) -> FileRead:
        return FileRead(
            d["path"],
            tuple((a, b) for a, b in d.get("columns", ())),
            tuple((a, b) for a, b in d.get("constants", ())),
            tuple(d.get("position_deletes", ())),
            d.get("deleted_rows", ""),
        )


@dataclass(frozen=True)
class DataSkipping:
    """The planner's row-group skipping for one scan (see ``squall.driver.planner.skipping``).

    ``planned`` row groups are in the table; ``minmax``, ``page_index``, ``bloom`` and ``cache`` of
    them were skipped by footer min/max statistics, Parquet page indexes (every page of a filtered
    column, or their intersection over the filtered columns, rules the predicate out), Parquet Bloom
    filters and the predicate cache.
    ``predicate`` is the scan's normalized predicate (the predicate cache's key) and ``probe``
    lists (path, row group, first row, end row, file stamp) of the row groups read whose outcome
    for ``predicate`` the cache does not know yet: workers evaluate ``probe_sql`` and report
    which of them matched no row.
    """

    planned: int = 0
    minmax: int = 0
    bloom: int = 0
    cache: int = 0
    predicate: str = ""
    probe: tuple[tuple[str, int, int, int, str], ...] = ()
    #: the condition workers evaluate for the probe (the scan's filters, its own column names)
    probe_sql: str = ""
    #: why the scan is not probed (e.g. many rows expected to pass per row group); "" when it is
    probe_note: str = ""
    page_index: int = 0

    @staticmethod
    def from_dict(d: dict[str, Any]) -> DataSkipping:
        return DataSkipping(
            d["planned"],
            d["minmax"],
            d["bloom"],
            d["cache"],
            d["predicate"],
            tuple((str(p[0]), int(p[1]), int(p[2]), int(p[3]), str(p[4])) for p in d["probe"]),
            d.get("probe_sql", ""),
            d.get("probe_note", ""),
            int(d.get("page_index", 0)),
        )


@dataclass(frozen=True)
class ScanInput:
    """A table scan feeding a stage.

    ``columns`` are (column in the file, name in the stage SQL). ``splits[r]``
    are rank r's row groups; with ``replicated`` every rank reads every split
    (``splits`` then has one entry).
    """

    name: str
    table: str
    location: str
    columns: tuple[tuple[str, str], ...]
    splits: tuple[tuple[Split, ...], ...]
    replicated: bool = False
    filters: tuple[str, ...] = ()
    #: Arrow schema of the scan's output (IPC-serialized, base64): empty splits keep their types
    schema_b64: str = ""
    kind: str = "scan"
    #: the scan operator: "parquet" (Storage row-group reads) or "s3select" (operators/s3select.py)
    scan: str = "parquet"
    #: the operator's options as (key, value) pairs, e.g. (("format", "csv"),)
    scan_options: tuple[tuple[str, str], ...] = ()
    #: work stealing (``squall.operators.steal``): ``splits[r]`` is rank r's queue of splits; a rank
    #: that finishes its queue steals unclaimed splits from the others' (any rank may read any split)
    steal: bool = False
    #: row groups skipped (min/max, Bloom, predicate cache) and the cache's probe; None: no skipping
    skipping: DataSkipping | None = None
    #: split by ranges of this integer column (in the file) for a join in place (driver/planner/colocate.py):
    #: rank r keeps only the rows whose value lies in ``key_bounds[r]`` = [low, high) (None: unbounded);
    #: the row groups that straddle a bound are in both ranks' splits
    key_column: str = ""
    key_bounds: tuple[tuple[int | None, int | None], ...] = ()
    #: how to read the files of the splits that are not read as written (see :class:`FileRead`)
    files: tuple[FileRead, ...] = ()
    #: what the table's source says of this scan (format, snapshot, ``partitions``/``files`` read of total),
    #: as (key, value) pairs, for explain and stats (``TableInfo.source_notes``)
    source_notes: tuple[tuple[str, str], ...] = ()
    #: the planner's estimate of the rows passing ``filters`` over all ranks (0: none); steers estimates only
    est_rows: float = 0.0

    def keep(self) -> float:
        """The estimated share of the scanned rows that pass ``filters`` (1 without an estimate)."""
        scanned = sum(s.rows for part in self.splits for s in part)
        if self.est_rows <= 0 or scanned <= 0:
            return 1.0
        return min(1.0, self.est_rows / scanned)

    def file_read(self, path: str) -> FileRead | None:
        """The :class:`FileRead` of ``path``, or None when the file holds the table's columns as they are."""
        for f in self.files:
            if f.path == path:
                return f
        return None

    def splits_for(self, rank: int) -> tuple[Split, ...]:
        if self.replicated:
            return self.splits[0] if self.splits else ()
        return self.splits[rank] if rank < len(self.splits) else ()

    def bounds_for(self, rank: int) -> tuple[int | None, int | None] | None:
        """Rank ``rank``'s [low, high) of ``key_column``, or None when the scan is not split by key range."""
        if not self.key_column or rank >= len(self.key_bounds):
            return None
        return self.key_bounds[rank]


@dataclass(frozen=True)
class ExchangeInput:
    """The part of upstream stage ``stage``'s output addressed to this rank; with ``columns``, read under those
    names (one per column of the stage's output, in order): a stage computed once for two readers is read by the
    second under its own column names."""

    name: str
    stage: int
    kind: str = "exchange"
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Output:
    """Where a stage's rows go.

    kind: ``hash`` (partition by ``partition_sql`` modulo the receivers), ``broadcast``,
    ``gather`` (to rank 0), ``range`` (range-partitioned by sort ``keys`` with their ``order``
    modifiers, e.g. ``"DESC NULLS LAST"``, using splitters every sender computes from a sample
    of all senders' keys, traded first in a small exchange round of their own: see
    :mod:`squall.operators.rangepart`) or ``result`` (the query result: on rank 0, or one part
    per rank of the stage, concatenated by the driver in rank order).
    """

    kind: str
    senders: tuple[int, ...] = ()
    receivers: tuple[int, ...] = ()
    keys: tuple[str, ...] = ()
    partition_sql: str = ""
    order: tuple[str, ...] = ()
    #: skew-aware hash exchange (``squall.operators.skew``) when > 0: ``partition_sql`` is the full key
    #: hash, rows fall into this many radix partitions, assigned to ranks from the global histogram
    partitions: int = 0
    #: the co-partition group (id of its first stage): its exchanges share one assignment
    group: int = 0
    #: heavy hitters (selective broadcast): "keep" (this side's hot-key rows stay on their rank),
    #: "broadcast" (this side's rows of the other side's hot keys go to every rank), "either", "" (none);
    #: an outer join without residual condition: "preserved" (keeps its hot keys; its rows of the other
    #: side's hot keys go to the ranks holding that key's rows) and "null_supplied" (rows of the other side's
    #: hot keys go to every rank; its own hot keys' rows stay on the ranks that reported them)
    heavy: str = ""
    #: skew-aware groups: a side may go whole to every rank (the other side staying where it is) when its
    #: actual bytes, summed over the senders, are at most this and the cheaper move (0: never)
    broadcast_limit: float = 0.0
    #: skew-aware groups keyed by one integer column (Neo-Join's order-preserving radix partitioning): SQL
    #: of the key as BIGINT, and the key domain [range_lo, range_hi] both sides share; the histogram round
    #: also counts ``partitions`` equal-width key ranges, and the group is partitioned by range when that
    #: balances as well as the hash and keeps more rows where they are (locality); "" = hash only
    range_sql: str = ""
    range_lo: int = 0
    range_hi: int = 0
    #: skew-aware groups of an outer join: SQL that is true when a partitioning key is NULL (such rows
    #: never match, so their key is never handled as a heavy hitter); "" = not needed
    null_sql: str = ""
    #: a hash exchange by one integer key whose senders' scan splits each hold one key range (Parquet
    #: statistics): (lowest key, rank) per range, ascending; a row goes to the rank of the range holding its
    #: key (``partition_sql`` is not used), so rows of data clustered by the key stay where they are, with no
    #: histogram round. Empty = by ``partition_sql``.
    split_ranges: tuple[tuple[int, int], ...] = ()
    #: a run-time join decision (``squall.operators.runtime_join``) when > 0: the id of the stage whose actual
    #: size decides (the join's side that may be broadcast). Its output (``runtime_role`` "decides") goes whole
    #: to every rank when its rows' bytes, summed over the senders (``Exchange.sizes``), are at most
    #: ``runtime_limit``, else by hash; the other side's output ("stays") then stays on the rank that made it
    #: (no exchange at all), else by hash
    runtime_join: int = 0
    runtime_role: str = ""
    runtime_limit: float = 0.0


@dataclass(frozen=True)
class Stage:
    id: int
    ranks: tuple[int, ...]
    inputs: tuple[ScanInput | ExchangeInput, ...]
    sql: str
    output: Output
    columns: tuple[tuple[str, str], ...] = ()  # (name, DuckDB type) of the output
    note: str = ""
    #: join filters applied in this stage, in order, as (label, SQL of the rows before the filter, SQL of
    #: the rows after it, name): the worker runs each filter's SQL once and registers its rows under its
    #: name, which ``sql`` (and a later filter's SQL) reads, and reports the rows before (the filtered scan's
    #: row groups, from the footers) and after it
    join_filters: tuple[tuple[str, str, str, str], ...] = ()


@dataclass(frozen=True)
class WriteSpec:
    """Where a write plan's last stage puts its rows (``COPY … TO``, ``CREATE TABLE AS``, ``INSERT``).

    Every rank of the result stage writes its own part files with DuckDB's ``COPY`` into
    ``<staging>/<query id>/r<rank>-a<attempt>/`` and returns, instead of rows, a manifest of what it wrote
    (one row per file: ``path``, ``relative``, ``rows``, ``bytes``); the driver commits once every rank
    succeeded (``squall.driver.write.commit``). Nothing is visible at ``target`` before the commit.

    - ``target``: the final location, a folder (``single_file`` false) or one file;
    - ``format``: ``parquet``, ``csv`` or ``json`` (JSON lines);
    - ``options``: DuckDB ``COPY`` options as (NAME, SQL literal), checked by the driver;
    - ``partition_by``: hive ``key=value`` folders by these columns of the result (left out of the files);
    - ``partition_exprs``: computed partition keys (name, SQL over the result's columns) whose folders
      split the files (Iceberg transforms); they are not columns of the files either;
    - ``extension``: the part files' suffix (``parquet``, ``csv.gz``, …);
    - ``table_format``: what the commit makes of the files (``files``: plain files; ``iceberg``).
    """

    target: str
    staging: str
    format: str = "parquet"
    options: tuple[tuple[str, str], ...] = ()
    partition_by: tuple[str, ...] = ()
    partition_exprs: tuple[tuple[str, str], ...] = ()
    single_file: bool = False
    extension: str = "parquet"
    table_format: str = "files"

    @staticmethod
    def from_dict(d: dict[str, Any]) -> WriteSpec:
        return WriteSpec(
            d["target"],
            d["staging"],
            d.get("format", "parquet"),
            tuple((k, v) for k, v in d.get("options", ())),
            tuple(d.get("partition_by", ())),
            tuple((k, v) for k, v in d.get("partition_exprs", ())),
            bool(d.get("single_file", False)),
            d.get("extension", "parquet"),
            d.get("table_format", "files"),
        )


@dataclass(frozen=True)
class Plan:
    """A whole distributed plan for ``world_size`` workers; ``write``: the result is written, not
    returned (see :class:`WriteSpec`)."""

    sql: str
    world_size: int
    stages: tuple[Stage, ...]
    result_names: tuple[str, ...]
    result_types: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    format: int = PLAN_FORMAT
    write: WriteSpec | None = None

    def stage(self, stage_id: int) -> Stage:
        for s in self.stages:
            if s.id == stage_id:
                return s
        raise KeyError(stage_id)

    @property
    def result_stage(self) -> Stage:
        return self.stages[-1]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """The plan as compact JSON, made once per plan (a plan is immutable; every query sends its plan to each
        rank, and the stats' estimate fingerprints it: ~1 ms a TPC-DS plan each time)."""
        return self._json

    @functools.cached_property
    def _json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Plan:
        if d.get("format") != PLAN_FORMAT:
            raise ValueError(f"unsupported plan format {d.get('format')!r}")
        stages = []
        for s in d["stages"]:
            inputs: list[ScanInput | ExchangeInput] = []
            for i in s["inputs"]:
                if i["kind"] == "scan":
                    inputs.append(
                        ScanInput(
                            name=i["name"],
                            table=i["table"],
                            location=i["location"],
                            columns=tuple(tuple(c) for c in i["columns"]),
                            splits=tuple(
                                tuple(
                                    Split(
                                        sp["path"],
                                        tuple(sp["row_groups"]),
                                        tuple(tuple(r) for r in sp["row_ranges"]),
                                        sp["rows"],
                                        sp["nbytes"],
                                        sp["whole_file"],
                                    )
                                    for sp in per_rank
                                )
                                for per_rank in i["splits"]
                            ),
                            replicated=i["replicated"],
                            filters=tuple(i["filters"]),
                            schema_b64=i["schema_b64"],
                            scan=i.get("scan", "parquet"),
                            scan_options=tuple(tuple(o) for o in i.get("scan_options", ())),
                            steal=bool(i.get("steal", False)),
                            skipping=DataSkipping.from_dict(i["skipping"]) if i.get("skipping") else None,
                            key_column=i.get("key_column", ""),
                            key_bounds=tuple((lo, hi) for lo, hi in i.get("key_bounds", ())),
                            files=tuple(FileRead.from_dict(f) for f in i.get("files", ())),
                            source_notes=tuple((k, v) for k, v in i.get("source_notes", ())),
                            est_rows=float(i.get("est_rows", 0.0)),
                        )
                    )
                else:
                    inputs.append(
                        ExchangeInput(name=i["name"], stage=i["stage"], columns=tuple(i.get("columns", ())))
                    )
            o = s["output"]
            output = Output(
                o["kind"],
                tuple(o["senders"]),
                tuple(o["receivers"]),
                tuple(o["keys"]),
                o["partition_sql"],
                tuple(o.get("order", ())),
                partitions=o.get("partitions", 0),
                group=o.get("group", 0),
                heavy=o.get("heavy", ""),
                broadcast_limit=o.get("broadcast_limit", 0.0),
                range_sql=o.get("range_sql", ""),
                range_lo=o.get("range_lo", 0),
                range_hi=o.get("range_hi", 0),
                null_sql=o.get("null_sql", ""),
                split_ranges=tuple((int(lo), int(r)) for lo, r in o.get("split_ranges", ())),
                runtime_join=o.get("runtime_join", 0),
                runtime_role=o.get("runtime_role", ""),
                runtime_limit=o.get("runtime_limit", 0.0),
            )
            stages.append(
                Stage(
                    id=s["id"],
                    ranks=tuple(s["ranks"]),
                    inputs=tuple(inputs),
                    sql=s["sql"],
                    output=output,
                    columns=tuple(tuple(c) for c in s["columns"]),
                    note=s["note"],
                    join_filters=tuple((j[0], j[1], j[2], j[3]) for j in s.get("join_filters", ())),
                )
            )
        return Plan(
            sql=d["sql"],
            world_size=d["world_size"],
            stages=tuple(stages),
            result_names=tuple(d["result_names"]),
            result_types=tuple(d["result_types"]),
            notes=tuple(d["notes"]),
            format=d["format"],
            write=WriteSpec.from_dict(d["write"]) if d.get("write") else None,
        )

    @staticmethod
    def from_json(text: str) -> Plan:
        return Plan.from_dict(json.loads(text))
