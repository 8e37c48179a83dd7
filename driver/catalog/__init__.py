"""The catalog: named tables, where their files are, and what is known of them before any row is read.

- :mod:`.tables`: the :class:`~.tables.Catalog` (tables by name, their versions for the plan cache,
  ``register_folder`` for a data folder);
- :mod:`.source`: the :class:`~.source.TableSource` interface (files with partition values, schema,
  statistics, filter pushdown, a stamp), looked up by format; :mod:`.parquet` is plain Parquet files;
- :mod:`.listing`: the one place that says which files a location names (a file, a folder, a glob in any
  path component; local or ``s3://``), the tables of a data folder, and the Iceberg and Delta folders that
  are never read as plain Parquet;
- :mod:`.literals`: a filter read as ``column op literal`` (filter pushdown here, data skipping and
  estimates above);
- :mod:`.info`: ``TableInfo``, ``RowGroup``, ``ColumnChunkStats`` (what the planner reads);
- :mod:`.scan_kinds`, :mod:`.s3select`: how workers read a table's files (Parquet row groups, S3 Select);
- :mod:`.snapshot`: a catalog's metadata saved as JSON (the planner's fixtures plan from one).

May import: :mod:`squall.driver.options`, :mod:`squall.operators` (storage), :mod:`squall.registry`,
:mod:`squall.errors`; nothing else of the driver (every stage above reads it).
"""
