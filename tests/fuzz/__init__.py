"""Differential fuzzer: random read-only SQL over TPC-H (plus NULL-heavy twins) or TPC-DS, Squall at W = 1..4 vs
DuckDB.

Library parts (importable from tests and ``benchmarks/fuzz.py``):

- :mod:`tests.fuzz.dataset`: the fuzz data folders (TPC-H SF0.01 + NULL-heavy and empty tables; TPC-DS SF0.01);
- :mod:`tests.fuzz.schema`: what the generator knows of the data (``TPCH``, ``TPCDS``: tables, keys, literals);
- :mod:`tests.fuzz.generator`: a seeded grammar generator (the same seed and schema give the same queries);
- :mod:`tests.fuzz.oracle`: runs one query on DuckDB and on Squall, classifies the outcome;
- :mod:`tests.fuzz.minimize`: delta debugging over the sqlglot AST while the failure reproduces;
- :mod:`tests.fuzz.cases`: saved minimised cases (``cases/NNN.sql``) replayed by ``test_fuzz_cases.py``.
"""
