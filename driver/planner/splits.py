"""How scans are cut over the ranks: row-group splits balanced by rows, and which scans every rank reads whole.

Shared by the scan rule (:mod:`squall.driver.planner.rules.scans`) and the mechanisms that re-split scans
(:mod:`.colocate`: by key range) or ask whether a side is a replicated scan (:mod:`.runtime`, the join rules).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable

from squall.driver.catalog.tables import RowGroup
from squall.driver.ir import nodes as L
from squall.driver.planner.core import Context
from squall.plan import Split


def replicable(ctx: Context, node: L.Node) -> bool:
    """Whether :func:`broadcast` makes ``node`` a replicated scan: scans (under filters, projections and
    inner joins) of at most ``replicated_scan_rows`` rows in all, which every rank reads whole."""
    return _pure(node) and _scan_rows(ctx, node) <= ctx.options.replicated_scan_rows


def _pure(node: L.Node) -> bool:
    if isinstance(node, L.Scan):
        return True
    if isinstance(node, (L.Filter, L.Project)):
        return _pure(node.input)
    if isinstance(node, L.Join) and node.kind in ("inner", "cross"):
        return _pure(node.left) and _pure(node.right)
    return False


def _scan_rows(ctx: Context, node: L.Node) -> float:
    if isinstance(node, L.Scan):
        return float(ctx.catalog.table(node.table).num_rows)
    return sum(_scan_rows(ctx, c) for c in node.children)


def split_row_groups(
    groups: Iterable[RowGroup], columns: list[str], file_groups: Counter[str]
) -> tuple[Split, ...]:
    """Group row groups by file; contiguous row groups merge into one row range.

    ``file_groups`` counts every file's row groups, so a split holding all of them is marked whole.
    """
    out: list[Split] = []
    for rg in groups:
        rng = (rg.first_row, rg.first_row + rg.num_rows)
        nbytes = sum(rg.columns[c].compressed_bytes for c in columns if c in rg.columns)
        if out and out[-1].path == rg.path:
            prev = out[-1]
            ranges = list(prev.row_ranges)
            if ranges[-1][1] == rng[0]:
                ranges[-1] = (ranges[-1][0], rng[1])
            else:
                ranges.append(rng)
            out[-1] = Split(
                rg.path,
                (*prev.row_groups, rg.index),
                tuple(ranges),
                prev.rows + rg.num_rows,
                prev.nbytes + nbytes,
            )
        else:
            out.append(Split(rg.path, (rg.index,), (rng,), rg.num_rows, nbytes))
    return tuple(
        dataclasses.replace(sp, whole_file=True) if len(sp.row_groups) == file_groups[sp.path] else sp
        for sp in out
    )


def balance(groups: list[RowGroup], world: int) -> list[list[RowGroup]]:
    """Contiguous chunks of row groups with about equal row counts, one per rank."""
    total = sum(g.num_rows for g in groups)
    chunks: list[list[RowGroup]] = [[] for _ in range(world)]
    if not groups:
        return chunks
    if len(groups) <= world:
        for i, g in enumerate(groups):
            chunks[i].append(g)
        return chunks
    target = total / world
    acc = 0
    for g in groups:
        rank = min(int(math.floor((acc + g.num_rows / 2) / target)) if target else 0, world - 1)
        chunks[rank].append(g)
        acc += g.num_rows
    return chunks
