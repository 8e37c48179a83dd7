"""Estimates that steer plan choices, never results.

:mod:`.selectivity`: the fraction of rows a filter passes (literals and min/max pruning are in
:mod:`squall.driver.skipping`); :mod:`.rows`: rough output rows of a logical subtree (``estimate_rows``);
:mod:`.join_order`: the greedy order of a SELECT's inner joins and each join's estimated rows (NDVs and table
sizes from the catalog).

May import: :mod:`squall.driver.skipping`, :mod:`squall.driver.ir`, :mod:`squall.driver.catalog`,
:mod:`squall.driver.options`; never the logical stage or the planner (they import this).
"""
