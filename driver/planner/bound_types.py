"""DuckDB's output names and types of a planner text, bound once per text up to column names.

The planner binds SQL on empty inputs to learn types (:meth:`~squall.driver.planner.core.Context.typecheck`,
:meth:`~squall.driver.planner.core.Context.logical_types`), and a query that reads one subquery several
times translates it into copies that differ only in their fresh column names: TPC-DS Q4 binds its
``year_total`` union (three aggregating joins) once per each of its six references, ~0.1 s of its planning.
:func:`bound_types` keys each text by its canonical form (double-quoted identifiers numbered in order of
first appearance, the kept empty tables' names kept as they are: they stand for column types), and maps a
remembered answer's column names back through the text's own identifiers.

The text is all DuckDB binds: every input is a CTE over an empty table of its types or of typed NULLs,
nothing of a catalog is read, so the answer depends on the text alone and is kept for the process (up to
:data:`KEPT` texts). An answer whose column names are not all quoted identifiers of the text (a name DuckDB
made up, which may spell an identifier), or that has a type naming something (a STRUCT's field names are the
text's identifiers), is not kept; nor is a text that spells one name in two cases.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from squall.driver.frontend import value_lists
from squall.driver.planner.identifiers import number_identifiers

KEPT = 4096
_KEPT_NAMES = "__squall_empty_"
#: a type that names nothing of the text (not a STRUCT's fields, an ENUM's values…): kept answers hold only these
_PLAIN_TYPE = re.compile(r"^[A-Z][A-Z0-9_ ]*(\(\d+(, ?\d+)?\))?(\[\d*\])*$")

_known: OrderedDict[str, tuple[tuple[int, ...], tuple[str, ...]]] = OrderedDict()
_lock = threading.Lock()


def _canonical(sql: str) -> tuple[str, list[str]] | None:
    """``sql`` with quoted identifiers numbered, and the identifiers (unquoted) in the order numbered; None
    when two of them differ only in case (DuckDB reads them as one name: a text of other names that differ
    would bind otherwise) or when it may hold a comment."""
    if "--" in sql or "/*" in sql:  # a comment may hold a quote that is no string's: not canonical
        return None
    text, names = number_identifiers(sql, _kept_name)
    if len({name.lower() for name in names}) != len(names):
        return None
    return text, [name.replace('""', '"') for name in names]


def _kept_name(name: str) -> str | None:
    return f'"{name}"' if name.startswith(_KEPT_NAMES) else None


def bound_types(relation: Callable[[str], Any], sql: str) -> tuple[tuple[str, str], ...]:
    """(name, DuckDB type) of each output column of ``sql`` as ``relation(sql)`` binds it
    (:func:`~squall.driver.frontend.value_lists.typed_relation`), remembered per canonical text. DuckDB's
    errors pass through, and are not remembered."""
    canonical = _canonical(sql)
    if canonical is not None:
        key, names = canonical
        with _lock:
            known = _known.get(key)
            if known is not None:
                _known.move_to_end(key)
        if known is not None:
            return tuple((names[c], t) for c, t in zip(*known, strict=True))
    rel = value_lists.typed_relation(relation, sql)
    out = tuple(zip(rel.columns, (str(t) for t in rel.types), strict=True))
    if canonical is not None:
        position = {name: i for i, name in enumerate(canonical[1])}
        if all(name in position and _PLAIN_TYPE.match(t) for name, t in out):
            entry = (tuple(position[name] for name, _t in out), tuple(t for _n, t in out))
            with _lock:
                _known[canonical[0]] = entry
                while len(_known) > KEPT:
                    _known.popitem(last=False)
    return out
