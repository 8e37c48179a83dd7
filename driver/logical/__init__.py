"""The logical stage: the rewritten query (:mod:`squall.driver.sql`) → Squall's logical plan (:mod:`squall.driver.ir`).

- :mod:`.translate`: the Translator (entry, queries, set operations), composed of :mod:`.clauses`, one module
  per SELECT clause (sources → join tree → aggregate → window → projection → DISTINCT → ORDER BY → LIMIT);
  :mod:`.scope` its name scopes, :mod:`.unnest` unnest in FROM;
- :mod:`.decorrelate`: every form of subquery made a join (subqueries, LATERAL, correlation more than one level
  deep);
- :mod:`.fallback`: the one-rank part, for what has no distributed plan;
- :mod:`.rules`: rewrites of the logical plan, in ``RULES`` order (prune, eager aggregation, coalesce).

Row estimates and the inner join order are :mod:`squall.driver.estimate`'s; expression helpers are
:mod:`squall.driver.ir.exprs`.

May import: :mod:`squall.driver.sql`, :mod:`squall.driver.frontend`, :mod:`squall.driver.estimate`,
:mod:`squall.driver.skipping`, :mod:`squall.driver.ir`, :mod:`squall.driver.catalog`, :mod:`squall.driver.options`;
never the planner.
"""
