"""The driver: SQL text → a distributed plan, and the platforms that run it.

- the compiler: :mod:`.frontend` (parse, safety rules, DuckDB binding), :mod:`.catalog` (tables and
  Parquet footers; :mod:`.catalog_snapshot` saves one as JSON), :mod:`.translate` / :mod:`.subqueries` /
  :mod:`.scope` (SQL → the logical IR of :mod:`.logical`), :mod:`.prune`, :mod:`.fallback` (one-rank
  parts), :mod:`.planner` (the distributed planner: one module per rule), :mod:`.compile` (the whole
  pipeline), :mod:`.explain`, :mod:`.stats`;
- data skipping beyond min/max: :mod:`.predicates` (normalized scan predicates), :mod:`.predicate_cache`,
  :mod:`.parquet_indexes` (page indexes and Bloom filters read by DuckDB), :mod:`.metadata_mirror` (local
  sparse copies of S3 objects' footers and indexes), :mod:`.skipping_stats`; the planner's
  :mod:`.planner.skipping` applies them;
- costs and forecasts: :mod:`.cost` (Lambda and S3 prices), :mod:`.scale` (the SimPy model),
  :mod:`.forecast` (estimates for explain and ``workers="auto"``);
- :mod:`.platforms`: where the W workers run, each platform with its worker-side entry point.

May import: :mod:`squall.operators`, :mod:`squall.exchange`, :mod:`squall.plan`, :mod:`squall.aws`,
:mod:`squall.registry`, :mod:`squall.errors` — never the SDK (``squall.connection``, ``squall.client``…),
the service or the functions (``make check-arch`` enforces it).
"""
