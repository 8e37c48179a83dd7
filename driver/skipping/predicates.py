"""Normalized scan predicates and implication between them (the predicate cache's keys).

A scan's filters (a conjunction) become a :class:`Predicate`: a set of atoms over
the table's own column names, so the spelling of a query does not matter (alias,
conjunct order, ``5 > x`` vs ``x < 5``, ``BETWEEN`` vs two comparisons, the order
of an ``IN`` list). Atoms are ranges (``=``, ``<``, ``<=``, ``>``, ``>=``,
``BETWEEN`` with a literal), ``IN`` lists of literals, or any other conjunct as
canonical SQL text. :meth:`Predicate.implies` is conservative: it says True only
when every row passing one predicate provably passes the other.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from squall.driver.catalog.literals import column_constraint

#: (low, low inclusive, high, high inclusive); None bounds are open
Range = tuple[Any, bool, Any, bool]
_OPEN: Range = (None, True, None, True)


def _encode(value: Any) -> list[str]:
    if isinstance(value, bool):
        raise TypeError("boolean literal")
    if isinstance(value, int):
        return ["i", str(value)]
    if isinstance(value, decimal.Decimal):
        return ["n", str(value)]
    if isinstance(value, dt.date):
        return ["d", value.isoformat()]
    if isinstance(value, str):
        return ["s", value]
    raise TypeError(f"unsupported literal {value!r}")


def _decode(item: list[str]) -> Any:
    tag, text = item
    if tag == "i":
        return int(text)
    if tag == "n":
        return decimal.Decimal(text)
    if tag == "d":
        return dt.date.fromisoformat(text)
    return text


def _atom(pred: exp.Expression, source_of: Mapping[str, str]) -> list[Any]:
    """One conjunct as a JSON-able atom over source column names."""
    c = column_constraint(pred)
    if c is not None and c[0] in source_of:
        col, op, value = source_of[c[0]], c[1], c[2]
        try:
            if op == "in":
                return ["in", col, sorted({json.dumps(_encode(v)) for v in value})]
            lo, hi = (value, value) if op == "eq" else value if op == "between" else (None, None)
            bounds = {
                "eq": (lo, True, hi, True),
                "between": (lo, True, hi, True),
                "lt": (None, True, value, False),
                "lte": (None, True, value, True),
                "gt": (value, False, None, True),
                "gte": (value, True, None, True),
            }[op]
            a, ai, b, bi = bounds
            return [
                "range",
                col,
                _encode(a) if a is not None else None,
                ai,
                _encode(b) if b is not None else None,
                bi,
            ]
        except TypeError:
            pass
    renamed = pred.transform(
        lambda n: exp.column(source_of.get(n.name, n.name), quoted=True) if isinstance(n, exp.Column) else n
    )
    return ["sql", renamed.sql(dialect="duckdb", normalize=True)]


def predicate_key(filters: Iterable[exp.Expression], source_of: Mapping[str, str]) -> str:
    """The canonical text of a conjunction of filters (equal for equal predicates, however spelled)."""
    atoms = {json.dumps(_atom(f, source_of), separators=(",", ":")) for f in filters}
    return "[" + ",".join(sorted(atoms)) + "]"


@dataclass(frozen=True)
class Predicate:
    """A parsed predicate key: per-column ranges and IN sets, plus other conjuncts as SQL text."""

    ranges: tuple[tuple[str, Range], ...]  # one atom each (not merged): what must hold
    ins: tuple[tuple[str, frozenset[Any]], ...]
    other: frozenset[str]

    def column_range(self, column: str) -> Range | None:
        """The intersection of this predicate's ranges and IN values on ``column`` (None: no bound)."""
        found = False
        lo, loi, hi, hii = _OPEN
        points = self.column_values(column)
        for col, (a, ai, b, bi) in self.ranges:
            if col != column:
                continue
            found = True
            if a is not None and (lo is None or a > lo or (a == lo and not ai)):
                lo, loi = a, ai
            if b is not None and (hi is None or b < hi or (b == hi and not bi)):
                hi, hii = b, bi
        if points is not None and points:
            found = True
            pmin, pmax = min(points), max(points)
            if lo is None or pmin > lo:
                lo, loi = pmin, True
            if hi is None or pmax < hi:
                hi, hii = pmax, True
        return (lo, loi, hi, hii) if found else None

    def column_values(self, column: str) -> frozenset[Any] | None:
        """The values an ``IN``/``=`` conjunct allows on ``column`` (their intersection), or None."""
        sets = [s for col, s in self.ins if col == column]
        for col, (a, ai, b, bi) in self.ranges:
            if col == column and a is not None and a == b and ai and bi:
                sets.append(frozenset([a]))
        if not sets:
            return None
        out = sets[0]
        for s in sets[1:]:
            out &= s
        return out

    def implies(self, other: Predicate) -> bool:
        """Every row passing ``self`` passes ``other`` (conservative: False when unsure)."""
        try:
            if not other.other <= self.other:
                return False
            for col, want in other.ranges:
                values = self.column_values(col)
                if values is not None:
                    if not all(_within_point(v, want) for v in values):
                        return False
                    continue
                have = self.column_range(col)
                if have is None or not _within(have, want):
                    return False
            for col, allowed in other.ins:
                values = self.column_values(col)
                if values is None or not values <= allowed:
                    return False
            return True
        except TypeError:  # values of different kinds (a date against a number): not comparable
            return False


def _within_point(v: Any, want: Range) -> bool:
    a, ai, b, bi = want
    if a is not None and (v < a or (v == a and not ai)):
        return False
    return not (b is not None and (v > b or (v == b and not bi)))


def _within(have: Range, want: Range) -> bool:
    """Range ``have`` lies inside range ``want``."""
    lo, loi, hi, hii = have
    a, ai, b, bi = want
    if a is not None and (lo is None or lo < a or (lo == a and loi and not ai)):
        return False
    return not (b is not None and (hi is None or hi > b or (hi == b and hii and not bi)))


@functools.lru_cache(maxsize=4096)
def parse_key(key: str) -> Predicate:
    """The :class:`Predicate` of a key made by :func:`predicate_key`."""
    ranges: list[tuple[str, Range]] = []
    ins: list[tuple[str, frozenset[Any]]] = []
    other: set[str] = set()
    for atom in json.loads(key):
        if atom[0] == "range":
            _k, col, a, ai, b, bi = atom
            ranges.append((col, (_decode(a) if a else None, ai, _decode(b) if b else None, bi)))
        elif atom[0] == "in":
            ins.append((atom[1], frozenset(_decode(json.loads(v)) for v in atom[2])))
        else:
            other.add(atom[1])
    return Predicate(tuple(ranges), tuple(ins), frozenset(other))


def equality_values(key: str) -> dict[str, list[Any]]:
    """Column → the values an ``=``/``IN`` conjunct allows (what a Bloom filter can rule out)."""
    pred = parse_key(key)
    cols = {c for c, _s in pred.ins} | {c for c, (a, ai, b, bi) in pred.ranges if a is not None and a == b}
    out = {}
    for col in sorted(cols):
        values = pred.column_values(col)
        if values is not None:
            out[col] = sorted(values, key=repr)
    return out
