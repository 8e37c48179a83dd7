"""Common subplans computed once: a stage equal to one already cut, up to column names, is not cut again.

A query that reads one subquery twice (TPC-H Q15's ``revenue`` view, joined with ``supplier`` and searched
for its maximum; TPC-DS's CTEs) is translated into two copies of the same subtree, the second with fresh
column names. :meth:`~squall.driver.planner.core.Context.stage` asks :func:`stage_key` for a canonical form
of the stage it is about to cut (SQL, inputs, ranks and output, with quoted identifiers numbered in order
of first appearance); when an earlier stage has the same form, the consumer reads that stage's exchange,
renamed to its own column names, and the scan and work below it run once. A stage read by two consumers
never joins a skew-aware group (its partitioning is fixed for both); explain notes the reuse on the stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlglot.dialects.duckdb import DuckDB
from sqlglot.tokens import TokenType

from squall.driver.frontend import value_lists
from squall.plan import ExchangeInput, Output, ScanInput

_DIALECT = DuckDB()


class _Names:
    """Quoted identifiers → ``#0``, ``#1``… in order of first appearance."""

    def __init__(self) -> None:
        self.numbers: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        return self.numbers.setdefault(name, f"#{len(self.numbers)}")

    def sql(self, text: str) -> tuple[object, ...]:
        """``text`` as (token type, text) pairs, quoted identifiers numbered (function names, aliases such as
        ``t`` and literals stay as they are); long literal ``IN`` lists are not tokenized but kept as written
        (compiled sqlglot tokenizes in one call that holds the interpreter, ~300 ms for 100,000 values)."""
        text, held = value_lists.hold(text, prefix="in_list_")
        return tuple(
            (tok.token_type.name, self(tok.text) if tok.token_type == TokenType.IDENTIFIER else tok.text)
            for tok in _DIALECT.tokenize(text)
        ) + tuple(held.runs.values())


def _skipping(inp: ScanInput, names: _Names) -> tuple[object, ...] | None:
    """A scan's skipping as it compares: its probe condition is in the scan's own column names."""
    if inp.skipping is None:
        return None
    return (dataclasses.replace(inp.skipping, probe_sql=""), names.sql(inp.skipping.probe_sql))


def stage_key(
    sql: str, inputs: Sequence[ScanInput | ExchangeInput], ranks: tuple[int, ...], output: Output
) -> tuple[object, ...]:
    """The canonical form of a stage about to be cut: equal for two stages that compute the same rows
    (under other column names) from the same inputs on the same ranks and send them the same way."""
    names = _Names()
    parts: list[object] = [ranks]
    for inp in inputs:
        names(inp.name)
        if isinstance(inp, ExchangeInput):
            parts.append(("exchange", inp.stage))
            continue
        parts.append(
            (
                "scan", inp.table, inp.location, tuple((src, names(col)) for src, col in inp.columns),
                inp.splits, inp.replicated, tuple(names.sql(f) for f in inp.filters), inp.scan, inp.scan_options,
                inp.steal, _skipping(inp, names),
            )
        )  # fmt: skip
    parts.append(names.sql(sql))
    parts.append(
        (output.kind, tuple(names.sql(k) for k in output.keys), output.order, output.partitions, output.heavy)
    )
    return tuple(parts)
