"""Data skipping: the row groups of a Parquet scan that cannot hold a row passing its filters, read by no rank.

Every verdict is conservative: a row group is skipped only when metadata proves that no row in it passes;
anything unknown (no statistics, no index, values that do not compare, a failed read) keeps it. The checks,
in the order a scan meets them (the scan rule :mod:`squall.driver.planner.rules.scans` prunes by min/max,
then :mod:`squall.driver.planner.skipping` runs the rest on what is left and counts every verdict in the
scan's :class:`~squall.plan.DataSkipping`):

- :mod:`.minmax` — the footer's min/max statistics per column chunk: ``x = 5`` skips a row group whose
  ``x`` lies in [6, 10];
- :mod:`.page_index` — Parquet page indexes (a row group is skipped when the pages that may match on every
  filtered column share no row) and Bloom filters (``=``/``IN`` values a row group's filter rules out), both
  read by DuckDB from one local file;
- :mod:`.metadata_mirror` — for object-store tables, that local file: a sparse copy holding only a
  Parquet file's footer and index bytes, fetched with ranged GETs;
- :mod:`.predicate_cache` — the row groups where an earlier predicate that the scan's predicate implies
  matched no row (learned from what the workers report), keyed by :mod:`.predicates`: a scan's filters as
  a normalized predicate, and implication between two of them.

:mod:`squall.driver.catalog.literals` reads a conjunct as ``column op literal`` for all of them (and for a
table source's filter pushdown); the selectivity estimates read filters through it too.

May import: :mod:`squall.driver.ir`, :mod:`squall.driver.catalog` and :mod:`squall.driver.options`, and
below the driver :mod:`squall.plan`, :mod:`squall.operators` (storage, for the mirrors) and
:mod:`squall.errors`; never the estimates, the logical plan or the planner (they import this).
"""
