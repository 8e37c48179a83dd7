"""The worker's side of the predicate cache: which probed row groups held no row passing the scan's filters.

The planner lists a scan's *probe* (``ScanInput.skipping``: row groups whose outcome
the driver's predicate cache does not know). A rank evaluates the scan's filters on
the probed row groups it reads and reports, per scan, the row groups where no row
passed (``empty``) and where some did (``matched``); the driver stores them
(``squall.driver.skipping.predicate_cache``). Local files: one DuckDB view over just those
row groups, each tagged with its number (``file_row_number`` ranges, only the
filter columns are read, a CASE on ``file_row_number`` tags each row with its row group); other storages: the rows the scan already read, tagged
by row group. A replicated scan is probed by rank 0 only.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pyarrow as pa

from squall.operators.duck import ParquetView, Sandbox, _literal, ident
from squall.plan import ScanInput

TAG = "__squall_row_group"


def _probed(inp: ScanInput, rank: int) -> list[tuple[str, int, int, int]]:
    """(path, row group, first row, end row) of the probe that this rank reads."""
    skipping = inp.skipping
    if (
        skipping is None
        or not skipping.probe
        or not skipping.probe_sql
        or (inp.replicated and rank != 0)
        or inp.steal
    ):
        return []
    mine = {(s.path, rg) for s in inp.splits_for(rank) for rg in s.row_groups}
    return [(p, rg, a, b) for p, rg, a, b, _stamp in skipping.probe if (p, rg) in mine]


class ProbeView(ParquetView):
    """Probed row groups of local files, each row tagged with its row group's position in ``groups``."""

    groups: tuple[tuple[str, int, int, int], ...] = ()

    def __init__(self, columns: tuple[tuple[str, str], ...], groups: list[tuple[str, int, int, int]]) -> None:
        super().__init__(columns, tuple((_local(p), ((a, b),)) for p, _rg, a, b in groups))
        object.__setattr__(self, "groups", tuple(groups))

    def sql(self) -> str:
        """One ``read_parquet`` per file: rows of the probed ranges, tagged by a CASE on the row number."""
        select = ", ".join(f"{ident(src)} AS {ident(name)}" for src, name in self.columns)
        by_file: dict[str, list[tuple[int, int, int]]] = {}
        for i, (p, _rg, a, b) in enumerate(self.groups):
            by_file.setdefault(p, []).append((a, b, i))
        selects = []
        for path, ranges in by_file.items():
            ranges.sort()
            tag = " ".join(f"WHEN file_row_number < {b} THEN {i}" for _a, b, i in ranges)
            where = " OR ".join(
                f"(file_row_number >= {a} AND file_row_number < {b})" for a, b in _merged(ranges)
            )
            selects.append(
                f"SELECT {select}, CASE {tag} END AS {TAG} "
                f"FROM read_parquet({_literal(_local(path))}, file_row_number = true, hive_partitioning = false) WHERE {where}"
            )
        return "\nUNION ALL\n".join(selects)


def _merged(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """Sorted [a, b) ranges with contiguous neighbours joined."""
    out: list[tuple[int, int]] = []
    for a, b, _i in ranges:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _local(path: str) -> str:
    return os.path.abspath(path.removeprefix("file://"))


def view_name(scan: str) -> str:
    """The probe view's name for scan input ``scan``."""
    return f"__probe_{scan}"


def probe_view(inp: ScanInput, rank: int) -> ProbeView | None:
    """The DuckDB view a native (local files) scan is probed through, or None when nothing is probed."""
    groups = _probed(inp, rank)
    return ProbeView(inp.columns, groups) if groups else None


def record_native(db: Sandbox, inp: ScanInput, view: ProbeView) -> dict[str, Any]:
    """Probe a native scan through its view (made by :func:`probe_view`)."""
    assert inp.skipping is not None
    t0 = time.perf_counter()
    rows = db.relation(
        f"SELECT DISTINCT {TAG} FROM {ident(view_name(inp.name))} WHERE {inp.skipping.probe_sql}"
    ).fetchall()
    return _outcome(list(view.groups), {int(r[0]) for r in rows}, time.perf_counter() - t0)


def record_table(db: Sandbox, inp: ScanInput, rank: int, table: pa.Table) -> dict[str, Any] | None:
    """Probe a scan from the rows it read (``read_scan``'s order: splits, then row groups in order)."""
    groups = _probed(inp, rank)
    if not groups or inp.skipping is None:
        return None
    t0 = time.perf_counter()
    tags = np.full(table.num_rows, -1, dtype=np.int32)
    where = {(p, rg): i for i, (p, rg, _a, _b) in enumerate(groups)}
    offset = 0
    for split in inp.splits_for(rank):
        ranges = split.row_ranges
        position = offset  # table row of the split's first row
        for a, b in ranges:
            for i, (p, rg, first, end) in enumerate(groups):
                if p == split.path and (p, rg) in where and a <= first and end <= b:
                    tags[position + first - a : position + end - a] = i
            position += b - a
        offset = position
    if offset != table.num_rows:  # the rows are not laid out as the splits say: learn nothing
        return None
    name = view_name(inp.name)
    db.register(name, table.append_column(TAG, pa.array(tags)))
    try:
        rows = db.relation(
            f"SELECT DISTINCT {TAG} FROM {ident(name)} WHERE {TAG} >= 0 AND ({inp.skipping.probe_sql})"
        ).fetchall()
    finally:
        db.unregister(name)
    return _outcome(groups, {int(r[0]) for r in rows}, time.perf_counter() - t0)


def _outcome(groups: list[tuple[str, int, int, int]], matched: set[int], seconds: float) -> dict[str, Any]:
    return {
        "empty": [[p, rg] for i, (p, rg, _a, _b) in enumerate(groups) if i not in matched],
        "matched": [[p, rg] for i, (p, rg, _a, _b) in enumerate(groups) if i in matched],
        "probe_s": seconds,
    }
