"""A finished query's rows (Arrow) and statistics: :class:`Result`, shared by the embedded and remote SDK.

Conversions follow DuckDB's Python API: ``.df()`` gives the pandas types ``duckdb.sql(...).df()``
gives (DECIMAL → float64, DATE → datetime64, nullable integers → Int64 …), ``.arrow()``,
``.pl()`` (Polars), ``.show()`` prints DuckDB's box table, and ``repr()``/Jupyter show a preview.

May import: :mod:`squall.plan`, :mod:`squall.errors`, :mod:`squall.formats`
(pandas, polars and duckdb lazily).
"""

from __future__ import annotations

import contextlib
import html
import io
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from squall.errors import OptionError
from squall.plan import Plan

if TYPE_CHECKING:
    import pandas as pd

#: rows shown by ``repr()`` and in Jupyter
PREVIEW_ROWS = 10


class Result:
    """A finished query: the rows (Arrow) and the statistics of the run."""

    def __init__(self, table: pa.Table, stats: dict[str, Any], plan: Plan | None = None) -> None:
        self._table = table
        self.stats = stats
        self.plan = plan

    @property
    def columns(self) -> list[str]:
        return list(self._table.column_names)

    @property
    def num_rows(self) -> int:
        return self._table.num_rows

    def to_arrow(self) -> pa.Table:
        """The result as a ``pyarrow.Table`` (column names as the query wrote them)."""
        return self._table

    def arrow(self) -> pa.Table:
        """The result as a ``pyarrow.Table`` (same as :meth:`to_arrow`)."""
        return self._table

    def to_pandas(self) -> pd.DataFrame:
        """The result as a pandas DataFrame with DuckDB's types (needs pandas installed); see :meth:`df`."""
        return self.df()

    def df(self) -> pd.DataFrame:
        """The result as a pandas DataFrame, typed as ``duckdb.sql(...).df()`` types the same result."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise OptionError("df() needs pandas: pip install 'squall[pandas]'") from None
        from squall.formats import duck

        con = duck()
        try:
            return con.from_arrow(self._table).df()
        finally:
            con.close()

    def pl(self) -> Any:
        """The result as a Polars DataFrame (needs polars installed)."""
        try:
            import polars
        except ImportError:
            raise OptionError("pl() needs polars: pip install polars") from None
        return polars.from_arrow(self._table)

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Rows as Python tuples."""
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns)) if columns else []

    def _render(self, max_rows: int | None = None, max_width: int | None = None) -> str:
        """DuckDB's box rendering of the rows (names, types, values as DuckDB prints them)."""
        from squall.formats import duck

        con = duck()
        try:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                con.from_arrow(self._table).show(max_rows=max_rows, max_width=max_width)
            return buf.getvalue().rstrip("\n")
        finally:
            con.close()

    def show(self, max_rows: int | None = 40, max_width: int | None = None) -> None:
        """Print the rows as a table, as DuckDB's ``.show()`` does (first and last rows beyond ``max_rows``)."""
        if max_rows is not None and max_rows < 1:
            raise OptionError(f"max_rows must be at least 1, got {max_rows}")
        print(self._render(max_rows, max_width))

    def __len__(self) -> int:
        return self._table.num_rows

    def __repr__(self) -> str:
        head = f"<squall.Result {self._table.num_rows} rows x {self._table.num_columns} columns>"
        if self._table.num_columns == 0:
            return head
        return head + "\n" + self._render(PREVIEW_ROWS)

    def _repr_html_(self) -> str:
        """Jupyter: the first rows as an HTML table, with the column types and the row count."""
        from squall.formats import printable, sql_type

        shown = printable(self._table.slice(0, PREVIEW_ROWS))
        cells = [["NULL" if v is None else str(v) for v in c.to_pylist()] for c in shown.columns]
        out = ['<table class="squall-result">', "<thead><tr>"]
        for field in self._table.schema:
            name, kind = html.escape(field.name), html.escape(sql_type(field.type))
            out.append(f"<th>{name}<br><small>{kind}</small></th>")
        out.append("</tr></thead><tbody>")
        for i in range(shown.num_rows):
            out.append("<tr>" + "".join(f"<td>{html.escape(col[i])}</td>" for col in cells) + "</tr>")
        out.append("</tbody></table>")
        n = self._table.num_rows
        more = f", {n - shown.num_rows} not shown" if n > shown.num_rows else ""
        out.append(f"<p>{n} row{'s' if n != 1 else ''} x {self._table.num_columns} columns{more}</p>")
        return "".join(out)
