"""The logical IR and the helpers every stage shares.

:mod:`.nodes` (imported as ``L``): the immutable relational nodes; :mod:`.sqlgen`: a node tree as DuckDB SQL;
:mod:`.exprs`: helpers over sqlglot expressions (conjuncts, ``and_all``, the tables an expression reads, the
FROM items of a SELECT, ``set_where``, …), one copy of each; :mod:`.aggregates`: decomposable aggregates split
into partial and final steps. Imports: sqlglot and ``squall.errors`` only (the bottom of the driver, with
``catalog`` and ``options``).
"""
