"""Decorrelation: every form of subquery becomes joins that distribute like any other, in one room.

- :mod:`.subqueries`: EXISTS / IN / scalar subqueries (semi, anti, mark and dependent "delim" joins); the
  translator's mixin;
- :mod:`.lateral`: ``LATERAL (subquery)`` in FROM as plain joins (DuckDB's implicit laterals are marked by the
  SQL rule :mod:`squall.driver.sql.implicit_laterals` first);
- :mod:`.deep`: correlation more than one level deep, made one level with a dependent join.

Subquery coalescing (two EXISTS / NOT EXISTS over one table read once) is a logical rule
(:mod:`squall.driver.logical.rules.coalesce`); a part none of these can plan runs on one rank
(:mod:`squall.driver.logical.fallback`).
"""
