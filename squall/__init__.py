"""Squall: SQL over Parquet, planned into stages and run on W workers.

>>> import squall
>>> con = squall.connect(data="data/sf1", workers=2)
>>> con.sql("SELECT count(*) FROM lineitem").df()

``import squall`` is cheap: the engine (DuckDB, pyarrow, sqlglot, the driver) is imported
on first use of :func:`connect`, :class:`Connection` or :class:`Result`.

The ``squall`` folder holds the SDK (``connection``, ``result``, ``params``, ``client``, ``dbapi``,
``testing``), the CLI, ``service/``, ``formats`` (result encodings the SDK, the CLI and the service share),
the TPC-H/TPC-DS helpers, and the bottom layer every other package may use: ``plan`` (the wire format),
``aws``, ``registry``, ``errors``, ``version``. The SDK may import the driver and below, never the service;
the bottom layer imports only the standard library and ``errors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from squall.errors import (
    BindError,
    DataError,
    InternalError,
    NotSupportedError,
    OptionError,
    QueryCancelled,
    QueryRuntimeError,
    QueryTimeout,
    SqlSyntaxError,
    SquallError,
    UnsafeQueryError,
    UserError,
    WorkerError,
)
from squall.version import __version__

if TYPE_CHECKING:
    from squall.connection import Connection, connect
    from squall.result import Result

__all__ = [
    "BindError",
    "Connection",
    "DataError",
    "InternalError",
    "NotSupportedError",
    "OptionError",
    "QueryCancelled",
    "QueryRuntimeError",
    "QueryTimeout",
    "Result",
    "SqlSyntaxError",
    "SquallError",
    "UnsafeQueryError",
    "UserError",
    "WorkerError",
    "__version__",
    "connect",
]


def __getattr__(name: str) -> Any:
    """The engine's names, imported on first use (keeps ``import squall`` and the CLI fast)."""
    if name in ("Connection", "connect", "connection"):
        import squall.connection as con_module  # the import sets this package's attribute "connection"

        return con_module if name == "connection" else getattr(con_module, name)
    if name in ("Result", "result"):
        import squall.result as result_module

        return result_module if name == "result" else result_module.Result
    raise AttributeError(f"module 'squall' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
