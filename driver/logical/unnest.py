"""``unnest`` in FROM (``FROM t, unnest(t.tags) AS u(tag)``) as a row-local projection, so it stays distributed.

DuckDB's lateral unnest gives, for each row of the FROM items it reads, one row per list element (none for an
empty or NULL list) — exactly ``SELECT *, unnest(list) FROM …`` — so it needs no exchange: every rank expands
its own rows. Inner and cross joins commute, so each unnest is applied where it is cheapest and still correct:

- an unnest whose list reads one FROM item (its *home*) expands that item before the joins, after the item's own
  filters; its column then reads as a column of the home item, so predicates on it (``u.tag = d.tag``) are join
  keys like any other;
- an unnest of a constant list, or of columns from several items, expands the joined rows; predicates on its
  column filter after it.

Beside outer joins, an unnest with a home expands it before the joins when its home is not null-supplied
before it; ``LEFT JOIN unnest(l) ON true`` keeps a row whose list is empty or NULL with a NULL element
(``Translator._unnests_at_home``). Forms not taken here stay on the one-rank fallback: an unnest of a
null-supplied item or of several items beside an outer join, ``LEFT JOIN unnest(…) ON <condition>``, several
lists in one unnest, ``WITH ORDINALITY`` and named arguments (``recursive := true``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from squall.driver.ir import nodes as L

#: the elements per list assumed when the list is not a literal (for row estimates only)
LIST_LENGTH_GUESS = 4.0


@dataclass(frozen=True)
class FromUnnest:
    """One ``unnest(list) AS alias(column)`` of a FROM clause."""

    alias: str
    column: str
    arg: exp.Expression
    home: str | None = None  # the one FROM item the list reads (then ``column`` is an internal name)


def from_unnest(item: exp.Expression) -> FromUnnest | None:
    """The unnest a FROM item is, or None for any other item (``LATERAL unnest(…)`` is a plain unnest after
    :func:`name_unnest_columns`). Raises ``ValueError`` with the reason for an unnest form kept on one rank.
    """
    if not isinstance(item, exp.Unnest):
        return None
    if len(item.expressions) != 1 or isinstance(item.expressions[0], (exp.Kwarg, exp.PropertyEQ)):
        raise ValueError("UNNEST of several lists or with named arguments in FROM")
    if item.args.get("offset"):
        raise ValueError("UNNEST … WITH ORDINALITY in FROM")
    alias = item.args.get("alias")
    columns = list(alias.columns) if alias is not None else []
    if len(columns) > 1:
        raise ValueError("UNNEST in FROM with more than one column name")
    table = alias.name if alias is not None and alias.name else "unnest"
    column = columns[0].name if columns else (alias.name if alias is not None and alias.name else "unnest")
    return FromUnnest(table, column, item.expressions[0])


def expand(node: L.Node, internal: str, arg: exp.Expression) -> L.Node:
    """``node``'s columns and one row per element of ``arg`` (already in internal names) as ``internal``."""
    keep = tuple((name, L.col(name)) for name in node.names)
    return L.Project(node, (*keep, (internal, exp.Explode(this=arg))))


def rows_per_row(arg: exp.Expression) -> float:
    """Rows one input row becomes (a list literal's length, else a guess)."""
    if isinstance(arg, exp.Array):
        return float(len(arg.expressions))
    return LIST_LENGTH_GUESS
