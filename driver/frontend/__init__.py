"""The frontend: SQL text → a bound query, or one clear error line.

- :mod:`.names`: ``catalog.namespace.table`` and ``"t$snapshots"`` as the internal names the catalog
  registers them under (before the safety checks);
- :mod:`.parse`: one statement in DuckDB's dialect (syntax errors with line and column);
- :mod:`.safety`: only a plain read-only query over named tables passes (no table functions, file paths,
  settings, DDL/DML);
- :mod:`.unsupported`: forms DuckDB accepts that Squall does not answer yet, refused clearly (TABLESAMPLE);
- :mod:`.bind`: DuckDB, sandboxed, binds it on empty tables of the catalog's schemas (exact result names
  and types, DuckDB's own messages);
- :mod:`.pivot` / :mod:`.pivot_values`: PIVOT and UNPIVOT as plain SQL the planner distributes (a dynamic
  PIVOT's values read by a first query);
- :mod:`.boundary`: the error boundary of planning (a bug is one InternalError line, its traceback in a log).

May import: :mod:`squall.driver.catalog`, :mod:`squall.driver.options`, :mod:`squall.operators.duck` and
:mod:`squall.errors`; nothing else of the driver.
"""
