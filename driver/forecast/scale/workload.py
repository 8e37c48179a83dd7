"""From a :class:`squall.plan.Plan` to the work of every stage on every rank (what the simulator runs).

Sizes. The plan knows its scans exactly (rows and compressed bytes per split and rank) but not how many
rows each stage outputs. Those come from a :class:`StageSizes` — measured (``Result.stats["stages"]``
of a run, or the TPC-H profiles in the calibration file) or, without one, a rough guess by stage shape
(:func:`guess_sizes`).

Scaling to another scale factor (:func:`scaled`). TPC-H tables grow linearly with SF except ``nation``
and ``region`` (25 and 5 rows at every SF). A stage's output grows as ``SF ** e`` where the exponent e is
measured per stage from two profiled scale factors (SF0.1 and SF1: e ≈ 1 for joins and filters over
the big tables, ≈ 0 for aggregates over a fixed number of groups such as Q1's 4, in between for
top-k/partial aggregates), clipped to [0, 1]. The plan's *structure* (stages, exchange kinds) is the
one planned at the profiled SF: at SF1000 the real planner might pick a partitioned join where SF1 had
a broadcast; scans are spread evenly over the W ranks (at SF ≥ 100 every table but nation/region has
thousands of row groups, so a rank's share is within one row group of even).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import squall.driver.forecast.scale.emptiness as emptiness
from squall.plan import ExchangeInput, Plan, ScanInput, Stage

#: TPC-H tables that do not grow with the scale factor
FIXED_TABLES = frozenset({"nation", "region"})


def stage_shape(stage: Stage) -> str:
    """``join``, ``aggregate``, ``sort``, ``scan`` (scan inputs, no join/aggregate) or ``project``."""
    sql = " ".join(stage.sql.upper().split())
    if stage.join_filters or re.search(r"\bJOIN\b", sql):
        return "join"
    if "GROUP BY" in sql or re.search(r"\b(SUM|COUNT|MIN|MAX|AVG)\(", sql) or "SELECT DISTINCT" in sql:
        return "aggregate"
    if "ORDER BY" in sql:
        return "sort"
    if any(isinstance(i, ScanInput) for i in stage.inputs):
        return "scan"
    return "project"


@dataclass(frozen=True)
class StageSize:
    """Totals over all ranks of one stage's output (Arrow bytes, as ``Result.stats`` reports);
    ``rows_per_receiver``: rows each receiver of its exchange got (sorted receivers), when measured."""

    rows_out: float
    bytes_out: float
    rows_per_receiver: tuple[float, ...] = ()


@dataclass(frozen=True)
class StageSizes:
    """Output sizes per stage id, and where they came from."""

    sizes: Mapping[int, StageSize]
    source: str = "measured"

    @staticmethod
    def from_stats(stats: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> StageSizes:
        """From ``Result.stats`` (or its ``"stages"`` list); with the stats' ``"exchanges"``, the rows
        each receiver got (which receivers had rows: :mod:`.emptiness`)."""
        stages = stats["stages"] if isinstance(stats, Mapping) else stats
        exchanges = stats.get("exchanges", []) if isinstance(stats, Mapping) else []
        per_recv = {int(x["stage"]): tuple(float(v) for v in x.get("rows_per_rank") or ())
                    for x in exchanges if "stage" in x}  # fmt: skip
        return StageSizes({int(s["stage"]): StageSize(float(s["rows_out"]), float(s["bytes_out"]),
                                                      per_recv.get(int(s["stage"]), ()))
                           for s in stages})  # fmt: skip


@dataclass
class StageWork:
    """One stage: its ranks, per-rank inputs (arrays of length W) and total output."""

    id: int
    shape: str
    ranks: tuple[int, ...]
    scan_rows: np.ndarray
    scan_bytes: np.ndarray
    in_rows: np.ndarray
    in_bytes: np.ndarray
    rows_out: float
    bytes_out: float
    output_kind: str
    senders: tuple[int, ...]
    receivers: tuple[int, ...]
    n_columns: int
    scan_files: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scan_splits: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: per rank: expected output rows and probability of any output (:mod:`.emptiness`; empty: even)
    out_rows: np.ndarray = field(default_factory=lambda: np.zeros(0))
    out_alive: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: per rank: the exchange's pair weights (``requests.PairWeights``; empty: every pair has rows)
    sender_hit: np.ndarray = field(default_factory=lambda: np.zeros(0))
    receiver_hit: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: a hash exchange by the key ranges each rank's scan splits hold (``Output.split_ranges``): every
    #: row stays on the rank that made it, no remote piece carries rows
    stays_local: bool = False
    #: per input, in the stage's order: the Arrow bytes each rank gets of it (scans: rows x row width)
    input_bytes: tuple[np.ndarray, ...] = ()

    def out_share(self, rank: int) -> float:
        """Fraction of the stage's output produced on ``rank`` (its expected output rows, else
        proportional to its input)."""
        if rank not in self.ranks:
            return 0.0
        if len(self.out_rows) and self.rows_out > 0:
            return float(self.out_rows[rank]) / self.rows_out
        work = self.scan_rows + self.in_rows
        total = float(work[list(self.ranks)].sum())
        return float(work[rank]) / total if total > 0 else 1.0 / len(self.ranks)


@dataclass
class Workload:
    """All stages of one query for W ranks."""

    world: int
    stages: list[StageWork]
    sql: str = ""
    sizes_source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def bytes_scanned(self) -> float:
        return float(sum(s.scan_bytes.sum() for s in self.stages))


def _row_width(columns: Sequence[tuple[str, str]]) -> float:
    width = 0.0
    for _name, typ in columns:
        t = typ.upper()
        width += 24.0 if ("VARCHAR" in t or "STRING" in t) else 16.0 if "DECIMAL" in t else 8.0
    return max(width, 8.0)


def _groups_after_joins(sql: str) -> bool:
    """Whether the stage groups its joins' rows (a GROUP BY after its last JOIN: a partial or final aggregate over
    them), so it outputs groups, not joined rows."""
    text = " ".join(sql.upper().split())
    return text.rfind("GROUP BY") > text.rfind(" JOIN ")


def guess_sizes(plan: Plan) -> StageSizes:
    """Rough output sizes by stage shape when nothing was measured, from inputs whose scans keep the rows the
    planner estimated passing their filters (aggregates, and joins whose rows the stage groups: ≤ 1,000 groups
    per rank; other joins: half their input; scans: their filtered input; sorts: their input, or the LIMIT)."""
    out: dict[int, StageSize] = {}
    for stage in plan.stages:
        rows_in = 0.0
        for inp in stage.inputs:
            if isinstance(inp, ScanInput):  # the rows passing its filters, as the planner estimated them
                per = [sum(s.rows for s in inp.splits_for(r)) for r in stage.ranks]
                rows_in += float(sum(per)) * inp.keep()
            else:
                rows_in += out[inp.stage].rows_out if inp.stage in out else 0.0
        shape = stage_shape(stage)
        m = re.search(r"\bLIMIT\s+(\d+)", stage.sql.upper())
        if shape == "aggregate" or (shape == "join" and _groups_after_joins(stage.sql)):
            rows = min(rows_in, 1000.0 * len(stage.ranks))
        elif m:
            rows = min(rows_in, float(m.group(1)) * len(stage.ranks))
        elif shape == "join":
            rows = rows_in * 0.5
        else:  # scans: their filters are in rows_in already
            rows = rows_in
        out[stage.id] = StageSize(rows, rows * _row_width(stage.columns))
    return StageSizes(out, "guessed")


def from_plan(plan: Plan, sizes: StageSizes | None = None) -> Workload:
    """The plan's own per-rank scans (its splits) plus stage output sizes (``sizes`` or a guess)."""
    sizes = sizes or guess_sizes(plan)
    world = plan.world_size
    stages: list[StageWork] = []
    done: dict[int, StageWork] = {}
    measured = {sid: sz.rows_per_receiver for sid, sz in sizes.sizes.items()}
    for stage in plan.stages:
        scan_rows, scan_bytes = np.zeros(world), np.zeros(world)
        files, splits = np.zeros(world), np.zeros(world)
        in_rows, in_bytes = np.zeros(world), np.zeros(world)
        inputs: list[tuple[np.ndarray, np.ndarray]] = []
        held: list[np.ndarray] = []
        for inp in stage.inputs:
            if isinstance(inp, ScanInput):
                rows = np.zeros(world)
                for r in stage.ranks:
                    sp = inp.splits_for(r)
                    rows[r] = sum(s.rows for s in sp)
                    scan_bytes[r] += sum(s.nbytes for s in sp)
                    files[r] += len({s.path for s in sp})
                    splits[r] += sum(max(1, len(s.row_groups)) for s in sp)
                scan_rows += rows
                inputs.append((rows, (rows > 0).astype(float)))
                held.append(rows * inp.keep() * _row_width(inp.columns))
            elif isinstance(inp, ExchangeInput):
                before = in_bytes.copy()
                inputs.append(_deliver(done[inp.stage], in_rows, in_bytes, measured.get(inp.stage, ())))
                held.append(in_bytes - before)
        size = sizes.sizes.get(stage.id) or guess_sizes(plan).sizes[stage.id]
        work = StageWork(stage.id, stage_shape(stage), tuple(stage.ranks), scan_rows, scan_bytes, in_rows,
                         in_bytes, size.rows_out, size.bytes_out, stage.output.kind,
                         tuple(stage.output.senders), tuple(stage.output.receivers), max(1, len(stage.columns)),
                         files, splits, stays_local=bool(stage.output.split_ranges),
                         input_bytes=tuple(held))  # fmt: skip
        _outputs(work, stage.sql, inputs, measured.get(stage.id, ()))
        stages.append(work)
        done[stage.id] = work
    return Workload(world, stages, plan.sql, sizes.source)


def _outputs(
    work: StageWork, sql: str, inputs: list[tuple[np.ndarray, np.ndarray]], measured: Sequence[float]
) -> None:
    """Fill ``work``'s per-rank output and its exchange's pair weights (:mod:`.emptiness`)."""
    world = len(work.scan_rows)
    rule = emptiness.output_rule(sql)
    work.out_rows, work.out_alive = emptiness.stage_output(rule, work.ranks, inputs, work.rows_out, world)
    if work.output_kind == "hash" and work.stays_local:  # each receiver gets its own rows, nobody else's
        work.sender_hit, work.receiver_hit = np.zeros(world), work.out_alive.copy()
    elif work.output_kind == "hash":
        work.sender_hit, work.receiver_hit = emptiness.hash_pairs(
            work.out_rows, work.out_alive, work.senders, work.receivers, work.shape == "aggregate", measured
        )
    elif work.output_kind in ("broadcast", "gather"):
        work.sender_hit, work.receiver_hit = work.out_alive.copy(), np.ones(world)


def _deliver(
    up: StageWork, rows: np.ndarray, nbytes: np.ndarray, measured: Sequence[float] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """Add what upstream stage ``up`` sends to each receiver; return that input's (rows, non-empty
    probability) per rank."""
    world = len(rows)
    recv = list(up.receivers)
    if not recv:
        return np.zeros(world), np.zeros(world)
    alive = up.out_alive if len(up.out_alive) else np.ones(world)
    hit = up.receiver_hit if len(up.receiver_hit) else None
    if up.stays_local and len(up.out_rows) and len(measured) != len(recv):
        got, got_alive = np.zeros(world), np.zeros(world)
        got[recv], got_alive[recv] = up.out_rows[recv], alive[recv]
    else:
        got, got_alive = emptiness.deliver(up.output_kind, up.rows_out, alive, recv, hit, measured)
    rows += got
    if up.output_kind == "hash":
        nbytes += got * (up.bytes_out / up.rows_out) if up.rows_out > 0 else 0.0
    else:  # broadcast: everything to every receiver; gather: everything to the one receiver
        nbytes[recv] += up.bytes_out
    return got, got_alive


def _remap(ranks: Sequence[int], template_world: int, world: int) -> tuple[int, ...]:
    """A template stage's rank set at another W: all ranks stay all ranks, rank 0 stays rank 0."""
    if len(ranks) == template_world and template_world > 1:
        return tuple(range(world))
    if len(ranks) == 1:
        return (int(ranks[0]),) if ranks[0] < world else (0,)
    return tuple(range(min(world, len(ranks))))


def scaled(
    plan: Plan,
    sizes: StageSizes,
    world: int,
    sf_factor: float,
    exponents: Mapping[int, float] | None = None,
    rows_per_split: float = 120_000.0,
) -> Workload:
    """The plan (profiled at some SF and W) at ``sf_factor`` times its scale factor on ``world`` ranks.

    Scans: tables other than nation/region grow by ``sf_factor``; spread evenly over the stage's ranks
    (replicated scans: every rank reads all). Stage outputs grow by ``sf_factor ** exponents[stage]``
    (default 1). ``rows_per_split`` sets the number of row groups (ranged-GET units) of a scan.
    """
    exponents = exponents or {}
    tw = plan.world_size
    stages: list[StageWork] = []
    done: dict[int, StageWork] = {}
    for stage in plan.stages:
        ranks = _remap(stage.ranks, tw, world)
        scan_rows, scan_bytes = np.zeros(world), np.zeros(world)
        files, splits = np.zeros(world), np.zeros(world)
        in_rows, in_bytes = np.zeros(world), np.zeros(world)
        inputs: list[tuple[np.ndarray, np.ndarray]] = []
        held: list[np.ndarray] = []
        for inp in stage.inputs:
            if isinstance(inp, ScanInput):
                factor = 1.0 if inp.table in FIXED_TABLES else sf_factor
                per = [inp.splits_for(r) for r in (stage.ranks if not inp.replicated else stage.ranks[:1])]
                rows = sum(s.rows for sp in per for s in sp) * factor
                nbytes = sum(s.nbytes for sp in per for s in sp) * factor
                n_files = max(1, math.ceil(factor * len({s.path for sp in per for s in sp})))
                n_splits = max(1.0, rows / rows_per_split)
                idx = list(ranks)
                share = 1.0 if inp.replicated else 1.0 / len(idx)
                scan_rows[idx] += rows * share
                scan_bytes[idx] += nbytes * share
                splits[idx] += max(1.0, n_splits * share)
                files[idx] += (
                    max(1.0, min(n_files * share, n_splits * share)) if not inp.replicated else n_files
                )
                mine = np.zeros(world)
                mine[idx] = rows * share
                inputs.append((mine, (mine > 0).astype(float)))
                held.append(mine * inp.keep() * _row_width(inp.columns))
            elif isinstance(inp, ExchangeInput):
                before = in_bytes.copy()
                inputs.append(_deliver(done[inp.stage], in_rows, in_bytes))
                held.append(in_bytes - before)
        base = sizes.sizes.get(stage.id) or guess_sizes(plan).sizes[stage.id]
        grow = sf_factor ** min(1.0, max(0.0, exponents.get(stage.id, 1.0)))
        rows_out, bytes_out = base.rows_out * grow, base.bytes_out * grow
        if (
            stage.output.kind != "result"
            and len(stage.ranks) == tw
            and tw > 1
            and exponents.get(stage.id, 1) < 0.5
        ):
            # partial aggregates: every rank outputs about the same groups, so the total grows with W
            rows_out *= world / tw
            bytes_out *= world / tw
        out = stage.output
        senders = ranks if len(out.senders) == len(stage.ranks) else _remap(out.senders, tw, world)
        receivers = _remap(out.receivers, tw, world) if out.kind != "result" else ()
        work = StageWork(stage.id, stage_shape(stage), ranks, scan_rows, scan_bytes, in_rows, in_bytes,
                         rows_out, bytes_out, out.kind, senders if out.kind != "result" else (), receivers,
                         max(1, len(stage.columns)), files, splits,
                         stays_local=bool(out.split_ranges), input_bytes=tuple(held))  # fmt: skip
        _outputs(work, stage.sql, inputs, ())
        stages.append(work)
        done[stage.id] = work
    return Workload(world, stages, plan.sql, f"{sizes.source} x SF factor {sf_factor:g}")


def exponents_between(small: StageSizes, big: StageSizes, ratio: float) -> dict[int, float]:
    """Per-stage growth exponents from the sizes at two scale factors ``ratio`` apart."""
    out: dict[int, float] = {}
    for sid, b in big.sizes.items():
        a = small.sizes.get(sid)
        if a is None or a.rows_out <= 0 or b.rows_out <= 0 or ratio <= 1:
            out[sid] = 1.0
            continue
        out[sid] = min(1.0, max(0.0, math.log(b.rows_out / a.rows_out) / math.log(ratio)))
    return out


def with_world(work: Workload, **changes: Any) -> Workload:
    return replace(work, **changes)
