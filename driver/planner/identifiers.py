"""Generated SQL with its quoted identifiers numbered, so texts that differ only in column names compare equal.

Used to key DuckDB binds by text (:mod:`.bound_types`) and to find the repeated subtrees of a stage
(:mod:`.repeats`). The planner writes every column name double-quoted; a string literal is left as it is,
whatever it holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: a string literal (kept) or a double-quoted identifier (group 1: what is between the quotes)
_TOKEN = re.compile(r"'(?:[^']|'')*'|\"((?:[^\"]|\"\")*)\"")


def _numbered(_name: str) -> str | None:
    return None


def number_identifiers(sql: str, fixed: Callable[[str], str | None] = _numbered) -> tuple[str, list[str]]:
    """``sql`` with each double-quoted identifier written ``"#<n>"``, ``n`` counting distinct identifiers in
    order of first appearance, and those identifiers in that order (as written between the quotes, a quote
    still doubled). ``fixed(name)`` gives the text to write for a name that is not to be numbered (None:
    number it)."""
    numbers: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        inner = m.group(1)
        if inner is None:
            return m.group(0)
        kept = fixed(inner)
        if kept is not None:
            return kept
        return f'"#{numbers.setdefault(inner, len(numbers))}"'

    return _TOKEN.sub(number, sql), list(numbers)
