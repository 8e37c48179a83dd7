"""The order of a SELECT's inner joins, greedy by estimated size, and the rows each join gives.

The largest FROM item (rows * width) starts; each step joins the smallest item connected to what is joined
by an equality, a key join before a many-to-many one (TPC-H Q5) and a join that may filter before a lookup
(a whole, unfiltered table joined on its key only adds columns: TPC-DS Q17's ``item`` waits for the
``store_returns`` join), else the smallest item (a cross join). Another large item that references others (a
foreign key) starts instead when its greedy order joins far fewer rows in all (C_out, the estimated rows after
each join, summed): TPC-DS Q37's two months of ``inventory`` meet the few items before ``catalog_sales``,
whose scan their keys then cut, instead of all of ``catalog_sales`` joined first; the plan's notes say so.
Row estimates use the catalog's NDVs (from Parquet samples) and table sizes; they steer the plan, never
its results. The translator (:mod:`squall.driver.logical.clauses.joins`) builds the joins in this order."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import equi_between, tables_of

#: a join whose estimated output exceeds this many times its larger input is many-to-many (see _expands)
EXPANDING = 4.0
#: join keys whose NDVs cover this share of a table's rows are a key of that table
KEY_SHARE = 0.9
#: another source may start the joins when at least 1 / START_SHARE of the largest's rows * width …
START_SHARE = 20.0
#: … and its order's estimated joined rows at most 1 / START_GAIN of the largest's (see _cheapest_start)
START_GAIN = 1.5


@dataclass
class Source:
    """One FROM item of a SELECT while its join tree is built: its node and estimated rows and width."""

    alias: str
    node: L.Node
    rows: float
    width: float


@dataclass(frozen=True)
class JoinStep:
    """One inner join of :func:`order_joins`: ``source`` joined to the items of ``have`` on ``preds`` (the
    conjuncts that its joining makes usable), ``rows`` estimated after it."""

    source: Source
    have: frozenset[str]
    preds: tuple[exp.Expression, ...]
    rows: float


@dataclass(frozen=True)
class JoinOrder:
    """What :func:`order_joins` gives: the first source, the joins after it in order, the conjuncts no join
    used, and a note when the first source is not the largest (see :func:`_cheapest_start`)."""

    start: Source
    steps: list[JoinStep]
    pending: list[exp.Expression]
    note: str | None = None


def order_joins(
    catalog: Catalog, sources: list[Source], preds: list[exp.Expression], *, other_starts: bool = True
) -> JoinOrder:
    """The inner joins of ``sources`` in order. ``other_starts``: a source other than the largest may start
    (:func:`_cheapest_start`)."""
    largest = max(sources, key=lambda s: s.rows * s.width)
    if not other_starts or len(sources) < 3:
        start, steps, pending = _greedy(catalog, sources, preds, largest)
        return JoinOrder(start, steps, pending)
    return _cheapest_start(catalog, sources, preds, largest)


def _greedy(
    catalog: Catalog, sources: list[Source], preds: list[exp.Expression], start: Source
) -> tuple[Source, list[JoinStep], list[exp.Expression]]:
    """The joins after ``start``, each with the next source :func:`_next_source` picks."""
    by_alias = {s.alias: s for s in sources}
    remaining = dict(by_alias)
    del remaining[start.alias]
    have = {start.alias}
    rows = start.rows
    pending = list(preds)
    steps: list[JoinStep] = []
    while remaining:
        nxt = _next_source(catalog, rows, list(remaining.values()), pending, have, by_alias)
        del remaining[nxt.alias]
        usable = [p for p in pending if tables_of(p) <= have | {nxt.alias}]
        pending = [p for p in pending if p not in usable]
        if any(equi_between(p, have, nxt.alias) for p in usable):
            est = join_rows(catalog, rows, nxt, usable, have, by_alias)
            rows = max(rows, nxt.rows) if est is None else max(est, 1.0)
        else:
            rows = rows * nxt.rows
        steps.append(JoinStep(nxt, frozenset(have), tuple(usable), rows))
        have.add(nxt.alias)
    return start, steps, pending


def _cheapest_start(
    catalog: Catalog, sources: list[Source], preds: list[exp.Expression], largest: Source
) -> JoinOrder:
    """The order from the largest source, unless another large one that holds a foreign key (joined on a
    column that is not a key of its table) leads to fewer joined rows: the estimated rows after each join,
    summed (C_out), at most ``1 / START_GAIN`` of the largest's. That start is scanned where it lies and what
    it joins down to is broadcast to the larger tables joined later, whose scans the join filters then cut
    (TPC-DS Q37: ``inventory`` of two months joined with the few items before ``catalog_sales``, not all of
    ``catalog_sales`` joined first)."""
    order = _greedy(catalog, sources, preds, largest)
    by_alias = {s.alias: s for s in sources}
    others = [
        _greedy(catalog, sources, preds, s)
        for s in sources
        if s is not largest
        and s.rows * s.width * START_SHARE >= largest.rows * largest.width
        and _holds_foreign_key(catalog, s, preds, by_alias)
    ]
    base = _c_out(order[1])
    best = min(others, key=lambda o: _c_out(o[1]), default=None)
    if best is None or _c_out(best[1]) * START_GAIN > base:
        return JoinOrder(*order)
    note = (
        f"join order: starts from {best[0].alias}, not the largest source {largest.alias} "
        f"(estimated joined rows {_c_out(best[1]):,.0f} instead of {base:,.0f})"
    )
    return JoinOrder(*best, note=note)


def _c_out(steps: list[JoinStep]) -> float:
    return sum(step.rows for step in steps)


def _holds_foreign_key(
    catalog: Catalog, source: Source, preds: list[exp.Expression], by_alias: dict[str, Source]
) -> bool:
    """Whether ``source`` is joined to another source on one of its columns that is not a key of its table
    (a fact table's or a returns table's reference; not a dimension looked up by its key)."""
    rows = _table_rows(catalog, source.alias, by_alias)
    if not rows:
        return False
    for p in preds:
        for other in by_alias:
            if other == source.alias:
                continue
            pair = equi_between(p, {other}, source.alias)
            if pair is None:
                continue
            ndv = column_ndv(catalog, pair[1], by_alias)
            if ndv is not None and ndv < KEY_SHARE * rows:
                return True
    return False


def _next_source(
    catalog: Catalog,
    rows: float,
    remaining: list[Source],
    pending: list[exp.Expression],
    have: set[str],
    by_alias: dict[str, Source],
) -> Source:
    """The source joined next: the smallest connected by an equality (a key join before a many-to-many one),
    else the smallest."""
    connected = [s for s in remaining if any(equi_between(p, have, s.alias) for p in pending)]
    if len(connected) > 1:
        est = {s.alias: join_rows(catalog, rows, s, pending, have, by_alias) for s in connected}
        # a many-to-many join waits while a key join is possible (TPC-H Q5)
        keyed = [s for s in connected if not _expands(est[s.alias], rows, s)]
        connected = keyed or connected
        # a join that only adds columns waits while one that may filter is possible
        filtering = [s for s in connected if not _lookup(est[s.alias], rows, s, pending, have, by_alias)]
        connected = filtering or connected
    pool = connected or remaining
    return min(pool, key=lambda s: (s.rows * s.width, s.alias))


def _lookup(
    est: float | None,
    rows: float,
    nxt: Source,
    preds: list[exp.Expression],
    have: set[str],
    by_alias: dict[str, Source],
) -> bool:
    """Whether joining ``nxt`` (estimated to leave ``est`` of the ``rows`` joined so far) only adds columns: a
    whole table, no filter on it, joined on a key of it and to nothing else not yet joined, so each row joined
    so far meets one of its rows at most and the estimate keeps them all (``item`` in TPC-DS Q17). Joined
    before a join that filters, it widens every row that join reads and what is sent between them."""
    scan = by_alias[nxt.alias].node
    if not isinstance(scan, L.Scan) or scan.filters:
        return False
    if any(nxt.alias in (tables := tables_of(p)) and tables - have - {nxt.alias} for p in preds):
        return False  # it leads on to another item (customer to a filtered nation: TPC-H Q7)
    return est is not None and est >= rows


def _expands(est: float | None, rows: float, nxt: Source) -> bool:
    """Whether joining ``nxt``, estimated (:func:`join_rows`) to give ``est`` rows from the ``rows`` joined so
    far, is many-to-many: above ``EXPANDING`` times the larger input. No NDV known: not."""
    return est is not None and est > EXPANDING * max(rows, nxt.rows)


def join_rows(
    catalog: Catalog,
    rows: float,
    nxt: Source,
    preds: list[exp.Expression],
    have: set[str],
    by_alias: dict[str, Source],
) -> float | None:
    """Estimated rows of joining ``nxt`` on its equality keys with what is joined so far (``rows``);
    None when no NDV is known (NDVs from the catalog's samples). When the keys are a key of one side's
    table (their NDVs cover its rows: ``customer``'s c_custkey, ``partsupp``'s (partkey, suppkey)), each
    row of the other side meets at most one row, and a filtered keyed side keeps its share of them;
    else textbook: the product of the inputs over the larger key NDV of each key pair."""
    sel, known = 1.0, False
    raw_have, raw_nxt = 1.0, 1.0
    for p in preds:
        pair = equi_between(p, have, nxt.alias)
        if pair is None:
            continue
        ndv_have, ndv_nxt = column_ndv(catalog, pair[0], by_alias), column_ndv(catalog, pair[1], by_alias)
        if ndv_have is None and ndv_nxt is None:
            continue
        known = True
        raw_have *= ndv_have or 0.0
        raw_nxt *= ndv_nxt or 0.0
        # an unknown NDV is taken as a key's (one distinct value per row)
        sel /= max(min(ndv_have or rows, rows), min(ndv_nxt or nxt.rows, nxt.rows), 1.0)
    if not known:
        return None
    # (rows of the keyed side's table, the estimate): when both sides look keyed (a composite key's NDVs
    # multiply past any table's rows), the smaller table is the one the key belongs to
    keyed = []
    sides = [(raw_nxt, nxt.rows, rows, nxt.alias)]
    if len(have) == 1:
        sides.append((raw_have, rows, nxt.rows, next(iter(have))))
    for raw, side_rows, other_rows, alias in sides:
        table_rows = _table_rows(catalog, alias, by_alias)
        if table_rows and raw >= KEY_SHARE * table_rows:
            keyed.append((table_rows, other_rows * min(side_rows / table_rows, 1.0)))
    return min(keyed)[1] if keyed else rows * nxt.rows * sel


def _table_scan(alias: str, by_alias: dict[str, Source]) -> L.Scan | None:
    """The scan of the table under a table source (its filters looked through), None for anything else."""
    node = by_alias[alias].node
    while isinstance(node, L.Filter):
        node = node.input
    return node if isinstance(node, L.Scan) else None


def _table_rows(catalog: Catalog, alias: str, by_alias: dict[str, Source]) -> float | None:
    """Rows of the table under a table source (None for anything else)."""
    scan = _table_scan(alias, by_alias)
    return float(catalog.table(scan.table).num_rows) if scan is not None else None


def column_ndv(catalog: Catalog, e: exp.Expression, by_alias: dict[str, Source]) -> float | None:
    """NDV of a plain column of a table source (None for anything else)."""
    if not isinstance(e, exp.Column) or e.table not in by_alias:
        return None
    scan = _table_scan(e.table, by_alias)
    if scan is None:
        return None
    name = next((src for src, _ in scan.columns if src.lower() == e.name.lower()), None)
    return None if name is None else float(catalog.ndv(scan.table, name))
