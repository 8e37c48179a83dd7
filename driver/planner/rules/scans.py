"""Scans: which rank reads which row groups, and when every rank reads a table whole.

A scan is split by row group (after min/max pruning) into W contiguous chunks of
about equal row counts, so each rank reads a disjoint part with no exchange;
contiguous row groups of one file merge into one row range. A small join side
that is only scans, filters, projections and inner joins, over at most
``replicated_scan_rows`` table rows, is instead read whole by every rank
(replicated): cheaper than reading it once and broadcasting it.
"""

from __future__ import annotations

import base64
import dataclasses
from collections import Counter
from typing import cast

import pyarrow as pa
from sqlglot import exp

from squall.driver.catalog.info import TableInfo
from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import InputRef
from squall.driver.planner import skipping
from squall.driver.planner.core import RANDOM, REPLICATED, SINGLE, Context, Dist
from squall.driver.planner.joinfilter import apply_filters
from squall.driver.planner.splits import balance, replicable, split_row_groups
from squall.driver.planner.steal import stealable
from squall.driver.skipping.minmax import prune_row_groups
from squall.plan import FileRead, Output, ScanInput, Split

REQUIRED = True  # no other rule plans these nodes
NODES = (L.Scan, L.Values)


def plan(ctx: Context, node: L.Scan | L.Values) -> tuple[L.Node, Dist]:
    if isinstance(node, L.Values):
        return node, SINGLE
    replicated = ctx.replicate and ctx.world > 1
    out = apply_filters(ctx, node, _scan(ctx, node, ctx.replicate))
    return out, (REPLICATED if replicated else RANDOM)


def broadcast(ctx: Context, small: L.Node) -> L.Node:
    """``small`` on every rank: a replicated scan when cheap enough, else a broadcast stage."""
    if replicable(ctx, small):
        node, _ = ctx.build(small, replicate=True)
        return node
    node, dist = ctx.build(small)
    return broadcast_built(ctx, node, dist)


def broadcast_built(ctx: Context, node: L.Node, dist: Dist) -> L.Node:
    """The built ``node`` (lying as ``dist`` says) on every rank: a broadcast stage unless it is already."""
    if dist.kind == "replicated":
        return node
    return ctx.stage(node, dist, Output("broadcast"), "broadcast the small join side")


def _scan(ctx: Context, node: L.Scan, replicated: bool) -> L.Node:
    source_of = {internal: source for source, internal in node.columns}
    info = ctx.catalog.scan_table(node.table, _table_filters(node.filters, source_of))
    groups, skipped = skipping.for_scan(
        ctx, info, node, source_of, prune_row_groups(info, source_of, node.filters)
    )
    sources = [source for source, _i in node.columns]
    file_groups = Counter(rg.path for rg in info.row_groups)
    splits: tuple[tuple[Split, ...], ...]
    steal = stealable(ctx, info, len(groups), replicated)
    if replicated or ctx.world == 1:
        splits = (split_row_groups(groups, sources, file_groups),)
    elif steal:  # one split per row group: the work elements ranks steal
        splits = tuple(
            tuple(s for g in chunk for s in split_row_groups([g], sources, file_groups))
            for chunk in balance(groups, ctx.world)
        )
    else:
        splits = tuple(split_row_groups(chunk, sources, file_groups) for chunk in balance(groups, ctx.world))
    ctx.scans += 1
    name = f"s{ctx.scans}_{node.table.lower()}"
    schema = pa.schema([info.schema.field(source).with_name(internal) for source, internal in node.columns])
    ctx.scan_schemas[name] = schema
    ctx.inputs[name] = ScanInput(
        name=name,
        table=info.name,
        location=info.location,
        columns=node.columns,
        splits=splits,
        replicated=replicated and ctx.world > 1,
        filters=tuple(L.term_sql(f) for f in node.filters),  # ANDed as text
        schema_b64=base64.b64encode(schema.serialize().to_pybytes()).decode(),
        scan=info.scan,
        scan_options=info.scan_options,
        steal=steal,
        skipping=skipping.without_probe(skipped, "not probed: a stealing scan") if steal else skipped,
        files=_file_reads(info, splits, {source for source, _i in node.columns}),
        source_notes=info.source_notes,
        est_rows=float(node.est_rows),
    )
    out: L.Node = InputRef(name, node.names)
    if node.filters:
        pred = node.filters[0]
        if len(node.filters) > 1:
            pred = cast(exp.Expression, exp.and_(*[f.copy() for f in node.filters]))
        out = L.Filter(out, pred)
    return out


def _table_filters(filters: tuple[exp.Expression, ...], source_of: dict[str, str]) -> list[exp.Expression]:
    """The scan's filters over the table's own column names (those over its columns only)."""
    out = []
    for f in filters:
        columns = list(f.find_all(exp.Column))
        if columns and all(c.name in source_of for c in columns):
            out.append(
                f.transform(
                    lambda n: exp.column(source_of[n.name], quoted=True) if isinstance(n, exp.Column) else n
                )
            )
    return out


def _file_reads(
    info: TableInfo, splits: tuple[tuple[Split, ...], ...], columns: set[str]
) -> tuple[FileRead, ...]:
    """The FileReads of the files the splits read, cut to the scanned columns."""
    if not info.file_reads:
        return ()
    paths = sorted({sp.path for per_rank in splits for sp in per_rank} & set(info.file_reads))
    out = []
    for path in paths:
        fr = info.file_reads[path]
        out.append(
            dataclasses.replace(
                fr,
                columns=tuple(c for c in fr.columns if c[0] in columns),
                constants=tuple(c for c in fr.constants if c[0] in columns),
            )
        )
    return tuple(out)


__all__ = ["broadcast", "broadcast_built", "plan", "replicable"]
