"""The oracle: one query on DuckDB (the reference) and on Squall at some worker counts; the outcome classified.

Rules:

- DuckDB raises → ``rejected`` (the generator made an invalid query; counted, Squall is not asked). So does a
  query the reference cannot answer within its bounds (``REFERENCE_SECONDS``, ``REFERENCE_MEMORY``: a random
  non-equality join can be quadratic), reported as ``oracle limit: …``.
- Squall raises ``NotSupportedError`` (``not supported: …``) → ``refused`` (a to-do, not a failure).
- Squall returns rows that differ from DuckDB's (``squall.testing.compare_results``, the one comparator of
  every suite: types, exact decimals, float tolerance, tie-aware ORDER BY/LIMIT with DuckDB's tied rows as
  the candidates) → ``wrong``. Looser in one case: rows that tie on the ORDER BY keys except for the last bits of a float key (``variance()`` summed
  in another order) may come in either order. ``compare_results`` takes the keys in row order, so a float key
  off by an ulp followed by another key looks like a wrong order; such a result passes when Squall's rows are
  sorted by their own values and, with floats rounded to 7 significant digits and both sides re-sorted, equal
  DuckDB's.
- Squall raises any other ``UserError`` (bind error on SQL it generated itself, runtime error, …) where DuckDB
  answered → ``error``; anything else (a Python exception, a crashed worker) → ``internal``.
- Squall runs longer than ``SQUALL_SECONDS`` where DuckDB answered → ``timeout`` (a speed problem, reported
  and listed, not a wrong answer).
- Otherwise ``passed``.
"""

from __future__ import annotations

import math
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

import squall
from squall.driver.options import PlannerOptions
from squall.errors import NotSupportedError, QueryTimeout, UserError
from squall.testing import compare_results

from .dataset import duckdb_reference
from .schema import TPCH, Schema

FAILURES = ("wrong", "error", "internal")
REFERENCE_SECONDS = 20.0  # DuckDB's own time limit per query (interrupted beyond)
REFERENCE_MEMORY = "4GB"
SQUALL_SECONDS = 120.0  # Squall's limit per query and worker count


def _compare(actual: pa.Table, expected: pa.Table, sql: str, reference=None) -> str | None:  # type: ignore[no-untyped-def]
    """The suites' comparator (``squall.testing.compare_results``): the first problem or None."""
    return compare_results(actual, expected, sql, reference=reference)


def _order_clause(sql: str) -> str | None:
    """The outermost ORDER BY as SQL over the output columns (ordinals or bare names), else None."""
    try:
        node = sqlglot.parse_one(sql, dialect="duckdb")
    except sqlglot.errors.SqlglotError:
        return None
    while isinstance(node, exp.Subquery) and not node.args.get("order"):
        node = node.this
    order = node.args.get("order")
    if not isinstance(order, exp.Order) or not order.expressions:
        return None
    for ordered in order.expressions:
        item = ordered.this if isinstance(ordered, exp.Ordered) else ordered
        ordinal = isinstance(item, exp.Literal) and not item.is_string
        if not ordinal and not (isinstance(item, exp.Column) and not item.table):
            return None
    return ", ".join(o.sql(dialect="duckdb") for o in order.expressions)


def _round_floats(table: pa.Table, digits: int = 7) -> pa.Table:
    columns = []
    for col in table.columns:
        if pa.types.is_floating(col.type):
            values = [
                v if v is None or not math.isfinite(v) else float(f"{v:.{digits}g}") for v in col.to_pylist()
            ]
            columns.append(pa.array(values, col.type))
        else:
            columns.append(col)
    return pa.table(columns, names=table.column_names)


def float_order_ties(actual: pa.Table, expected: pa.Table, sql: str) -> bool:
    """True if ``actual`` differs from ``expected`` only by the order of rows whose float ORDER BY keys are
    equal but for their last bits: ``actual`` is sorted by its own values, and with floats rounded both
    sides re-sorted by the query's ORDER BY compare equal."""
    if not any(pa.types.is_floating(f.type) for f in (*actual.schema, *expected.schema)):
        return False
    order = _order_clause(sql)
    if order is None or len(set(actual.column_names)) != actual.num_columns:
        return False
    con = duckdb.connect()
    try:

        def resorted(table: pa.Table) -> pa.Table:
            con.register("fuzz_rows", table)
            try:
                return con.sql(f"SELECT * FROM fuzz_rows ORDER BY {order}").to_arrow_table()
            finally:
                con.unregister("fuzz_rows")

        if _compare(actual, resorted(actual), sql) is not None:
            return False  # not sorted by its own values: a wrong order
        rounded = resorted(_round_floats(actual)), resorted(_round_floats(expected))
        return _compare(*rounded, sql) is None
    except duckdb.Error:
        return False
    finally:
        con.close()


@dataclass
class Outcome:
    kind: str  # passed, rejected, refused, wrong, error, internal, timeout
    workers: int | None = None  # the worker count that failed or refused
    detail: str = ""  # what differed / the error message (one paragraph)
    error_type: str = ""  # exception class name for refused/error/internal
    seconds: float = 0.0
    rows: int | None = None

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES

    def signature(self) -> tuple[str, str]:
        """What must stay the same while minimising: the kind and, for errors, the exception type."""
        return (self.kind, self.error_type)


def refusal_reason(message: str) -> str:
    """``not supported: X (details)`` → ``X`` for the refusal histogram."""
    text = message.split("not supported:", 1)[-1].strip()
    for sep in (" (", ": ", "; "):
        text = text.split(sep, 1)[0]
    return text[:100]


@dataclass
class Oracle:
    """Warm connections: one DuckDB and one Squall connection per worker count (workers are processes).

    ``schema``: what ``data`` holds (the generator's schema for queries over it: ``runner.run`` uses it).
    """

    data: Path
    workers: tuple[int, ...] = (1, 2, 3, 4)
    schema: Schema = TPCH
    _squall: dict[int, squall.Connection] = field(default_factory=dict)
    _duck: duckdb.DuckDBPyConnection | None = None

    def duck(self) -> duckdb.DuckDBPyConnection:
        if self._duck is None:
            self._duck = duckdb_reference(self.data)
            self._duck.execute(f"SET memory_limit = '{REFERENCE_MEMORY}'")
        return self._duck

    def engine(self, w: int) -> squall.Connection:
        if w not in self._squall:
            # Squall's own stage plan at W=1 too: by default DuckDB would plan the whole query there
            options = PlannerOptions(whole_query_at_w1=False)
            self._squall[w] = squall.connect(data=str(self.data), workers=w, planner_options=options)  # type: ignore[assignment]
        return self._squall[w]

    def close(self) -> None:
        for con in self._squall.values():
            con.close()
        self._squall.clear()
        if self._duck is not None:
            self._duck.close()
            self._duck = None

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reference(self, sql: str):  # type: ignore[no-untyped-def]
        """DuckDB's answer (Arrow table), or the exception it raised (also when it hit the oracle's bounds)."""
        con = self.duck()
        timer = threading.Timer(REFERENCE_SECONDS, con.interrupt)
        timer.start()
        try:
            return con.sql(sql).to_arrow_table()
        except duckdb.InterruptException:
            return RuntimeError(f"oracle limit: DuckDB took over {REFERENCE_SECONDS:g} s")
        except duckdb.OutOfMemoryException:
            return RuntimeError(f"oracle limit: DuckDB needed over {REFERENCE_MEMORY}")
        except Exception as exc:
            return exc
        finally:
            timer.cancel()

    def run_squall(self, sql: str, w: int, expected) -> Outcome:  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            actual = self.engine(w).sql(sql, timeout=SQUALL_SECONDS).to_arrow()
        except QueryTimeout as exc:
            return Outcome("timeout", w, str(exc), type(exc).__name__, time.perf_counter() - start)
        except NotSupportedError as exc:
            return Outcome("refused", w, str(exc), type(exc).__name__, time.perf_counter() - start)
        except UserError as exc:
            return Outcome(
                "error", w, f"{type(exc).__name__}: {exc}", type(exc).__name__, time.perf_counter() - start
            )
        except Exception as exc:
            tb = traceback.format_exception(exc)
            last = "".join(tb[-3:]).strip()
            return Outcome(
                "internal",
                w,
                f"{type(exc).__name__}: {exc}\n{last}",
                type(exc).__name__,
                time.perf_counter() - start,
            )
        problem = _compare(actual, expected, sql, reference=self.duck())
        if problem is not None and float_order_ties(actual, expected, sql):
            problem = None
        elapsed = time.perf_counter() - start
        if problem is not None:
            return Outcome("wrong", w, problem, "", elapsed, actual.num_rows)
        return Outcome("passed", w, "", "", elapsed, actual.num_rows)

    def check(self, sql: str, workers: tuple[int, ...] | None = None) -> Outcome:
        """Run ``sql`` on DuckDB, then on Squall at each worker count (stopping at the first non-pass)."""
        expected = self.reference(sql)
        if isinstance(expected, Exception):
            first = str(expected).splitlines()[0] if str(expected) else ""
            return Outcome("rejected", None, f"{type(expected).__name__}: {first}", type(expected).__name__)
        total = 0.0
        for w in workers or self.workers:
            out = self.run_squall(sql, w, expected)
            total += out.seconds
            if out.kind != "passed":
                out.seconds = total
                return out
        return Outcome("passed", None, "", "", total, expected.num_rows)

    def failing_workers(self, sql: str, workers: tuple[int, ...] = (1, 2, 3, 4)) -> list[int]:
        """The worker counts at which ``sql`` fails (wrong/error/internal)."""
        expected = self.reference(sql)
        if isinstance(expected, Exception):
            return []
        return [w for w in workers if self.run_squall(sql, w, expected).failed]
