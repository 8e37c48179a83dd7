"""The logical IR every stage after translation shares, and the expression helpers every stage shares.

- :mod:`.nodes`: Squall's logical plan, a small immutable relational IR (Scan, Values, Filter, Project, Join,
  Aggregate, Sort, Limit, SetOp, Window, OneRank) whose columns have unique internal names;
- :mod:`.sqlgen`: a logical subtree rendered as DuckDB SQL over named inputs (a stage's local work);
- :mod:`.exprs`: helpers over sqlglot expressions, one copy of each (conjuncts, ``and_all``, ``set_where``, the
  tables an expression reads, the FROM items of a SELECT, …);
- :mod:`.aggregates`: decomposable aggregates split into partial and final steps (the planner's partial →
  final aggregates, the logical eager aggregation).

May import: nothing of the driver (sqlglot and :mod:`squall.errors` only).
"""
