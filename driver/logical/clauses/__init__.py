"""The translation of a SELECT, one module per clause; :class:`squall.driver.logical.translate.Translator`
composes them.

:mod:`.base` (names, the planned query, expression conversion) ← :mod:`.from_clause` (sources) ←
:mod:`.joins` (join tree) ← :mod:`.unnests` (UNNEST in FROM); :mod:`.aggregate` (GROUP BY),
:mod:`.window` (windows, QUALIFY), :mod:`.order_limit` (ORDER BY, LIMIT); :mod:`.select` puts a SELECT
together from them.

May import: the rest of :mod:`squall.driver.logical` (decorrelation, scope, unnest helpers) but not
:mod:`.translate` (it imports this), :mod:`squall.driver.estimate` (row estimates, join order),
:mod:`squall.driver.ir`, :mod:`squall.driver.catalog`.
"""
