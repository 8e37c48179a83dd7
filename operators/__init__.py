"""Sub-operators a worker runs for one rank: the worker loop (``worker``), storage
scans (``storage`` interface and registry, ``s3storage``, the scan kinds' readers in
``scan_kinds``: ``scan`` for Parquet, ``s3select``), the sandboxed DuckDB sub-plan
(``duck``), partitioning (``partition``) and fault injection for tests (``faults``).

May import: :mod:`squall.exchange`, :mod:`squall.plan`, :mod:`squall.errors`,
:mod:`squall.registry`, :mod:`squall.aws` — never the driver, the SDK or the service.
"""
