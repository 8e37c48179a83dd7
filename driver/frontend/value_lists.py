"""Long ``IN`` lists of literals held as one node.

``x IN (1, 5, 9, …)`` with 100,000 ids (what BI tools and scripts send) parses to 100,000 syntax-tree nodes, and
every rewrite and every ``.sql()`` copies them: planning took 7-12 s and left ~1 M cyclic objects (a node holds its
parent), whose collection held the interpreter for 0.5-0.9 s and stalled every other request of ``squall serve``;
compiled sqlglot (``sqlglotc``) tokenizes such a text in one call that holds the interpreter ~250 ms.

A list of at least :data:`MIN_VALUES` plain literals (numbers, negative numbers, strings) becomes one
:class:`sqlglot.exp.Var` whose text is the list as written, and whose ``meta`` keeps the Python values
(:func:`squall.driver.catalog.literals.in_list_values`) for pruning and estimates. ``Var`` is printed verbatim,
so every SQL text built from the tree, down to the workers' DuckDB, holds the list as the user wrote it (on
one line); rewrites copy one node. Text that is parsed again (a filter re-read from a plan) simply has the
literal list back.

Two steps, both in :func:`squall.driver.frontend.parse.parse`: :func:`hold` replaces each long run
``IN (lit, lit, …)`` of the text by a placeholder name before sqlglot reads it (a regular expression, so the
list is never tokenized), and :func:`compact` puts the runs back as held nodes — only where sqlglot saw the
placeholder as the single item of an ``IN`` list (else, say inside a string or a comment, the text is parsed as
written) — and holds any other long literal list the same way. A list with anything else in it (a column, an
expression, a cast) stays as it is, and so does a PIVOT's list, whose values name its columns.
"""

from __future__ import annotations

import decimal
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlglot import Dialect, exp

from squall.driver.catalog.literals import IN_VALUES_META, in_list_values

#: the shortest list held as one node (shorter ones cost nothing worth saving)
MIN_VALUES = 256
_DUCKDB = Dialect.get_or_raise("duckdb")
R = TypeVar("R")
_NUMBER = r"-?\s*\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
_STRING = r"'(?:[^']|'')*'"
_ITEM = rf"(?>{_NUMBER}|{_STRING})"
#: atomic items and a possessive repetition: a list that does not end in ")" fails at once, no backtracking
_RUN = re.compile(rf"\bIN\s*\(\s*({_ITEM}(?:\s*,\s*{_ITEM}){{{MIN_VALUES - 1},}}+)\s*\)", re.IGNORECASE)
_ITEMS = re.compile(rf"({_NUMBER})|({_STRING})")


class _Values(tuple[Any, ...]):
    """The Python values of a held list; copied with the tree by reference (it never changes)."""

    def __deepcopy__(self, _memo: object) -> _Values:
        return self


class Held:
    """The long lists :func:`hold` took out of a text, by placeholder name."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or f"squall_in_list_{secrets.token_hex(6)}_"
        self.runs: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self.runs)

    def take(self, match: re.Match[str]) -> str:
        name = f"{self.prefix}{len(self.runs)}"
        self.runs[name] = match.group(1)
        return f"IN ({name})"


def hold(sql: str, prefix: str | None = None) -> tuple[str, Held]:
    """``sql`` with every long literal run ``IN (…)`` replaced by ``IN (<placeholder>)``, and the runs (the
    placeholders are ``<prefix><n>``, by default with a prefix no text holds)."""
    held = Held(prefix)
    if len(sql) < 2 * MIN_VALUES:
        return sql, held
    return _RUN.sub(held.take, sql), held


def for_types(sql: str) -> str:
    """``sql`` with each long literal list cut to its first value of each kind (string, integer, decimal,
    exponent): all DuckDB needs to type the query (``IN`` is a boolean whatever its values) without reading
    100,000 of them (DuckDB's ``sql()`` tokenizes its text while holding the interpreter, ~150 ms). The
    column names DuckDB gives the cut text are right unless one holds ``IN (`` (:func:`names_need_whole_text`):
    an unaliased ``x IN (…)`` is named by its text, and a quoted name or a string may look like a list."""
    if len(sql) < 2 * MIN_VALUES:
        return sql

    def sample(match: re.Match[str]) -> str:
        kept: dict[str, str] = {}
        for item in _ITEMS.finditer(match.group(1)):
            kept.setdefault(_kind(item), item.group(0))
        return f"IN ({', '.join(kept.values())})"

    return _RUN.sub(sample, sql)


def _kind(item: re.Match[str]) -> str:
    if item.group(2):
        return "string"
    text = item.group(0).lower()
    return "exponent" if "e" in text else "decimal" if "." in text else "integer"


def names_need_whole_text(names: Sequence[str]) -> bool:
    """Whether column names DuckDB gave a :func:`for_types` text may differ from the whole text's."""
    return any("in (" in name.lower() for name in names)


def typed_relation(relation: Callable[[str], R], sql: str) -> R:
    """``relation(sql)`` for names and types only: made from the :func:`for_types` text when its names are
    right, else from ``sql``."""
    typing = for_types(sql)
    rel = relation(typing)
    if typing != sql and rel is not None and names_need_whole_text(rel.columns):  # type: ignore[attr-defined]
        rel = relation(sql)
    return rel


def _run_values(items: Sequence[str]) -> _Values:
    values: list[Any] = []
    for item in items:
        if item.startswith("'"):
            values.append(item[1:-1].replace("''", "'"))
            continue
        try:
            values.append(int(item))
        except ValueError:
            values.append(decimal.Decimal(item))
    return _Values(values)


def _plain(node: exp.Expression) -> bool:
    if isinstance(node, exp.Literal):
        return True
    return isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and node.this.is_number


def _held_node(text: str, values: _Values | None) -> exp.Var:
    node = exp.Var(this=text)
    if values is not None:
        node.meta[IN_VALUES_META] = values
    return node


def restore(tree: exp.Expression, held: Held) -> bool:
    """Put :func:`hold`'s runs back into ``tree`` as held nodes; False (tree unusable) when a placeholder is
    anywhere but as the single item of an ``IN`` list."""
    found = 0
    for node in tree.find_all(exp.In):
        items = node.expressions
        if len(items) == 1 and isinstance(items[0], exp.Column) and items[0].name in held.runs:
            if items[0].table or node.find_ancestor(exp.Pivot) is not None:
                return False
            run = [re.sub(r"^-\s+", "-", m.group(0)) for m in _ITEMS.finditer(held.runs[items[0].name])]
            node.set("expressions", [_held_node(", ".join(run), _run_values(run))])  # on one line
            found += 1
    return found == len(held.runs) and not any(
        held.prefix in str(n.this) for n in tree.find_all(exp.Identifier, exp.Literal, exp.Var)
    )


def compact(tree: exp.Expression) -> exp.Expression:
    """``tree`` with every other long literal ``IN`` list held as one node (changed in place, also returned)."""
    for node in list(tree.find_all(exp.In)):
        items = node.expressions
        if node.args.get("query") is not None or len(items) < MIN_VALUES or not all(map(_plain, items)):
            continue
        if node.find_ancestor(exp.Pivot) is not None:
            continue
        values = in_list_values(node)
        generator = _DUCKDB.generator()  # one generator, no copy per item (item.sql() copies)
        text = ", ".join(generator.sql(item) for item in items)
        node.set("expressions", [_held_node(text, None if values is None else _Values(values))])
        for item in items:  # no cycle left: the dropped nodes are freed at once, not by a full collection
            item.parent = None
    return tree
