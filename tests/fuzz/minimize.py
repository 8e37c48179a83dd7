"""Delta debugging over the sqlglot AST: drop clauses, predicates, joins, select items, CTEs and set-operation
branches, and replace expressions by their operands, while the failure still reproduces (same kind, same
exception type, at the same worker count) and DuckDB still accepts the query. A variant with a LIMIT or OFFSET
but no ORDER BY is never tried: any rows are a right answer to it, so its "failure" proves nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import sqlglot
from sqlglot import exp

_CLAUSES = ("where", "having", "order", "limit", "offset", "distinct", "qualify")
_SETOPS = (exp.Union, exp.Intersect, exp.Except)


def _variants(tree: exp.Expression) -> Iterator[exp.Expression]:
    """Smaller versions of ``tree``, roughly biggest cuts first."""
    n = len(list(tree.walk()))
    for i in range(n):
        node = list(tree.walk())[i]
        actions: list[Callable[[exp.Expression], None]] = []
        if isinstance(node, exp.With):
            for j in range(len(node.expressions)):
                actions.append(lambda x, j=j: x.expressions.pop(j) if len(x.expressions) > 1 else x.pop())
        if isinstance(node, _SETOPS):
            actions.append(lambda x: x.replace(x.this))
            actions.append(lambda x: x.replace(x.expression))
        if isinstance(node, exp.Select):
            for j in range(len(node.args.get("joins") or [])):
                actions.append(lambda x, j=j: x.args["joins"][j].pop())
            for arg in _CLAUSES + ("group",):
                if node.args.get(arg):
                    actions.append(lambda x, arg=arg: x.set(arg, None))
            if len(node.expressions) > 1:
                for j in range(len(node.expressions)):
                    actions.append(lambda x, j=j: x.expressions[j].pop())
        if isinstance(node, exp.Order | exp.Group) and len(node.expressions) > 1:
            for j in range(len(node.expressions)):
                actions.append(lambda x, j=j: x.expressions[j].pop())
        if isinstance(node, exp.Connector | exp.Binary) and not isinstance(node, exp.Alias | exp.Predicate):
            if isinstance(node.this, exp.Expression):
                actions.append(lambda x: x.replace(x.this))
            if isinstance(node.expression, exp.Expression):
                actions.append(lambda x: x.replace(x.expression))
        if isinstance(node, exp.Predicate) and isinstance(node.parent, exp.Where | exp.Having | exp.Filter):
            actions.append(lambda x: x.parent.pop())
        if isinstance(node, exp.Not | exp.Paren):
            actions.append(lambda x: x.replace(x.this))
        if isinstance(node, exp.Func | exp.Case | exp.Cast) and not isinstance(node, exp.AggFunc):
            for child in node.iter_expressions():
                if isinstance(child, exp.Column | exp.Literal | exp.Func):
                    key = child.arg_key
                    idx = child.index
                    actions.append(
                        lambda x, key=key, idx=idx: x.replace(
                            (x.args[key][idx] if idx is not None else x.args[key]).copy()
                        )
                    )
        if isinstance(node, exp.Subquery | exp.Exists | exp.In) and isinstance(node.parent, exp.Connector):
            actions.append(lambda x: x.replace(exp.true()))
        for act in actions:
            copy = tree.copy()
            target = list(copy.walk())[i]
            try:
                act(target)
            except Exception:
                continue
            yield copy


def _unordered_limit(tree: exp.Expression) -> bool:
    """Some query level of ``tree`` has a LIMIT or OFFSET without an ORDER BY (a nondeterministic answer)."""
    return any(
        isinstance(node, exp.Query | exp.Subquery)
        and not node.args.get("order")
        and (node.args.get("limit") or node.args.get("offset"))
        for node in tree.walk()
    )


def minimize(
    sql: str,
    still_fails: Callable[[str], bool],
    *,
    max_checks: int = 200,
    log: Callable[[str], None] | None = None,
) -> str:
    """Greedy delta debugging: apply the first smaller variant that still fails, repeat until none does."""
    try:
        tree = sqlglot.parse_one(sql, dialect="duckdb")
    except sqlglot.errors.SqlglotError:
        return sql
    best = tree
    best_sql = sql
    checks = 0
    seen: set[str] = {sql}
    improved = True
    while improved and checks < max_checks:
        improved = False
        for variant in _variants(best):
            try:
                text = variant.sql(dialect="duckdb")
            except Exception:
                continue
            if text in seen or len(text) >= len(best_sql) or _unordered_limit(variant):
                continue
            seen.add(text)
            checks += 1
            if still_fails(text):
                best, best_sql = variant, text
                improved = True
                if log:
                    log(f"  minimise: {len(text)} chars")
                break
            if checks >= max_checks:
                break
    return best_sql
