"""Squall: SQL over Parquet, planned into stages and run on W workers.

>>> import squall
>>> con = squall.connect(data="data/sf1", workers=2)
>>> con.sql("SELECT count(*) FROM lineitem").to_arrow()
"""

from squall.connection import Connection, connect
from squall.errors import (
    BindError,
    DataError,
    NotSupportedError,
    OptionError,
    QueryRuntimeError,
    SqlSyntaxError,
    SquallError,
    UnsafeQueryError,
    UserError,
    WorkerError,
)
from squall.result import Result
from squall.version import __version__

__all__ = [
    "BindError",
    "Connection",
    "DataError",
    "NotSupportedError",
    "OptionError",
    "QueryRuntimeError",
    "Result",
    "SqlSyntaxError",
    "SquallError",
    "UnsafeQueryError",
    "UserError",
    "WorkerError",
    "__version__",
    "connect",
]
