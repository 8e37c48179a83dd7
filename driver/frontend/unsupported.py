"""Forms of SQL DuckDB accepts that Squall does not answer yet: refused with one clear line, never ignored.

A form listed here would otherwise be dropped by the translator or answered differently by a distributed
plan, which is a wrong answer; each refusal names the form and where it stands in the query.
"""

from __future__ import annotations

from sqlglot import exp

from squall.driver.frontend.safety import where
from squall.errors import NotSupportedError


def refuse_unsupported(ast: exp.Expression) -> None:
    """Raise NotSupportedError for the first form of ``ast`` Squall cannot answer right yet."""
    for node in ast.walk():
        if isinstance(node, exp.TableSample):
            raise NotSupportedError(
                f"TABLESAMPLE and USING SAMPLE are not supported yet (a sample of each rank's share is not "
                f"DuckDB's sample): {where(node.parent or node)}"
            )
