"""Subqueries and LATERAL into joins the distributed planner knows.

:mod:`.subqueries`: EXISTS / IN / scalar subqueries as semi, anti, mark and (dependent) scalar joins (the
Translator's ``SubqueryMixin``); :mod:`.lateral`: LATERAL subqueries in FROM rewritten as plain SQL;
:mod:`.deep`: correlation more than one level deep made one level. Imports: ``logical.scope``, ``ir``; not the
translator (it imports this).
"""
