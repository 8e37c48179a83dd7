"""The logical IR every stage after translation shares.

- :mod:`.nodes`: Squall's logical plan, a small immutable relational IR (Scan, Values, Filter, Project, Join,
  Aggregate, Sort, Limit, SetOp, Window, OneRank) whose columns have unique internal names;
- :mod:`.sqlgen`: a logical subtree rendered as DuckDB SQL over named inputs (a stage's local work).

May import: nothing of the driver (sqlglot and :mod:`squall.errors` only).
"""
