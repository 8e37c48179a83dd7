"""A finished query's rows (Arrow) and statistics: :class:`Result`, shared by the embedded and remote SDK.

May import: :mod:`squall.plan`, :mod:`squall.errors` (pandas lazily).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from squall.errors import OptionError
from squall.plan import Plan

if TYPE_CHECKING:
    import pandas as pd


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

    def to_pandas(self) -> pd.DataFrame:
        """The result as a pandas DataFrame (needs pandas installed)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise OptionError("to_pandas() needs pandas: pip install 'squall[pandas]'") from None
        return self._table.to_pandas()

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Rows as Python tuples."""
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns)) if columns else []

    def __len__(self) -> int:
        return self._table.num_rows

    def __repr__(self) -> str:
        return f"<squall.Result {self._table.num_rows} rows x {self._table.num_columns} columns>"
