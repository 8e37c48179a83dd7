"""The one-rank fallback: a part of a query Squall has no distributed plan for runs in DuckDB on rank 0.

The part's own SQL text is kept as it is; each catalog table it reads becomes a scan
of only the columns the text mentions, filtered by the WHERE conjuncts that surely apply to
all of its rows (every rank reads its share), gathered to rank 0,
where a CTE named like the table hands those columns to the text under their own names.
The planner says so in a plan note and in the notes of the stages that gather (see
:mod:`squall.driver.planner.rules.onerank`): never a silent single-node plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

from squall.driver.catalog.tables import Catalog
from squall.driver.frontend.bind import BoundQuery, referenced_tables
from squall.driver.frontend.pivot_values import is_dynamic
from squall.driver.ir import nodes as L
from squall.driver.ir.exprs import conjuncts
from squall.errors import NotSupportedError

DIALECT = "duckdb"


def _all_columns(ast: exp.Expression) -> bool:
    """True when the text may read columns it does not name: ``*``, ``COLUMNS``, ``PIVOT``,
    ``NATURAL`` joins, a table (alias) used as a value (a struct of its row)."""
    tables = {t.name.lower() for t in ast.find_all(exp.Table)} | {
        t.alias.lower() for t in ast.find_all(exp.Table) if t.alias
    }
    for node in ast.walk():
        if isinstance(node, (exp.Columns, exp.Pivot)):
            return True
        if isinstance(node, exp.Star) and not isinstance(node.parent, (exp.Count, exp.AggFunc)):
            return True
        if isinstance(node, exp.Join) and str(node.args.get("method") or "").upper() == "NATURAL":
            return True
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in tables:
            return True
    return False


def _check_static_columns(ast: exp.Expression) -> None:
    """A PIVOT without IN lists has columns that depend on the data: a connection reads its values with
    a first query and plans it with IN lists (:mod:`squall.driver.frontend.pivot_values`); planned without one
    (``compile_sql`` alone), it is refused."""
    for pivot in ast.find_all(exp.Pivot):
        if is_dynamic(pivot):
            raise NotSupportedError(
                "PIVOT without an IN list of values outside a connection (its values are read by a first "
                "query): name the values, as in PIVOT t ON c IN ('a', 'b') USING sum(x)"
            )


def _pushable_filters(ast: exp.Expression, catalog: Catalog) -> dict[str, list[exp.Expression]]:
    """WHERE conjuncts that only read one table, by table name (lower case), with bare column names.

    Only for a table named once in the whole text, read directly in the FROM of a SELECT whose
    joins are all inner or cross: there the conjunct drops the same rows before the gather as
    after it. Anything else (outer joins, subqueries, a table read twice) keeps all its rows.
    """
    tree = ast.copy()
    for ident in tree.find_all(exp.Identifier):
        ident.set("this", ident.this.lower())
    schema: dict[str, object] = {}
    columns: dict[str, set[str]] = {}
    for name in {t.name for t in tree.find_all(exp.Table)}:
        if name in catalog:
            columns[name] = {f.name.lower() for f in catalog.table(name).schema}
            schema[name] = dict.fromkeys(columns[name], "VARCHAR")
    try:
        tree = qualify(tree, schema=schema, dialect=DIALECT, quote_identifiers=False)
    except Exception:  # sqlglot cannot qualify this text: push nothing
        return {}
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    tables = [t for t in tree.find_all(exp.Table)]
    counts = Counter(t.name for t in tables)
    out: dict[str, list[exp.Expression]] = {}
    for t in tables:
        if counts[t.name] != 1 or t.name in ctes or t.name not in columns:
            continue
        sel = t.parent.parent if t.parent is not None else None
        if not isinstance(t.parent, (exp.From, exp.Join)) or not isinstance(sel, exp.Select):
            continue
        joins = sel.args.get("joins") or []
        if any(
            j.side or j.args.get("method") or (j.kind or "INNER").upper() not in ("INNER", "CROSS")
            for j in joins
        ):
            continue
        alias = t.alias_or_name
        for c in conjuncts(sel.args.get("where")):
            if any(
                isinstance(n, (exp.Subquery, exp.Select, exp.Exists, exp.Window, exp.Star)) for n in c.walk()
            ):
                continue
            cols = list(c.find_all(exp.Column))
            if cols and all(col.table == alias and col.name in columns[t.name] for col in cols):
                bare = c.transform(lambda n: exp.column(n.name) if isinstance(n, exp.Column) else n)
                out.setdefault(t.name.lower(), []).append(bare)
    return out


def _internal_filters(
    filters: list[exp.Expression], cols: tuple[tuple[str, str], ...]
) -> tuple[exp.Expression, ...]:
    """Bare source column names → the scan's internal names."""
    internal = {source.lower(): i for source, i in cols}

    def fix(n: exp.Expression) -> exp.Expression:
        return L.col(internal[n.name]) if isinstance(n, exp.Column) else n

    return tuple(f.transform(fix) for f in filters if all(c.name in internal for c in f.find_all(exp.Column)))


def one_rank(
    catalog: Catalog,
    bound: BoundQuery,
    fresh: Callable[[str], str],
    reason: str,
    visible: tuple[str, ...] | None = None,
) -> tuple[L.OneRank, tuple[tuple[str, str], ...]]:
    """A :class:`~squall.driver.ir.nodes.OneRank` node for ``bound`` (a self-contained query) and its
    (visible name, internal name) outputs; ``visible`` overrides DuckDB's result names."""
    ast = bound.ast
    _check_static_columns(ast)
    mentioned = {i.name.lower() for i in ast.find_all(exp.Identifier)}
    everything = _all_columns(ast)
    ctes = {c.alias_or_name.lower() for c in ast.find_all(exp.CTE)}
    tables: list[str] = []
    columns: list[tuple[tuple[str, str], ...]] = []
    inputs: list[L.Node] = []
    pushed = _pushable_filters(ast, catalog)
    for name in referenced_tables(ast):
        if name.lower() in ctes or name not in catalog or name.lower() in (t.lower() for t in tables):
            continue
        info = catalog.table(name)
        used = [f.name for f in info.schema if everything or f.name.lower() in mentioned]
        used = used or [info.schema[0].name]  # row counts survive
        cols = tuple((source, fresh(source)) for source in used)
        width = info.row_width(used)
        tables.append(info.name)
        columns.append(cols)
        filters = _internal_filters(pushed.get(name.lower(), []), cols)
        inputs.append(L.Scan(info.name, cols, filters, float(info.num_rows), width))
    names = visible if visible is not None and len(visible) == len(bound.names) else bound.names
    out = tuple(fresh(n or "c") for n in names)
    sql = bound.sql.strip().rstrip(";").strip()
    node = L.OneRank(sql, tuple(tables), tuple(columns), tuple(inputs), out, reason)
    return node, tuple(zip(names, out))
