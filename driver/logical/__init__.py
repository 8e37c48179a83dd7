"""From a bound query's AST to the logical plan, and the rewrites of that plan.

:mod:`.translate`: the Translator (entry, queries, set operations) composed of :mod:`.clauses` (one module
per SELECT clause); :mod:`.decorrelate`: subqueries and LATERAL into joins; :mod:`.unnest`, :mod:`.scope`,
:mod:`.fallback` (a part that runs on one rank); :mod:`.rules`: logical rewrites (prune, eager aggregation,
coalesce). Imports: ``sql``, ``frontend``, ``estimate``, ``skipping``, ``ir``, ``catalog``, ``options``; never
the planner or anything above it.
"""
