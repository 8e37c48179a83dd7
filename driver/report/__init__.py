"""report: what a plan is and what a query did, read off the plan and the workers' reports.

- :mod:`.explain`: the plan as text (``squall explain``), with :mod:`.outputs` (the text of an exchange's
  skew handling and run-time join decision);
- :mod:`.stats`: ``Result.stats``, the whole dict, from :func:`.stats.assemble` (the one entry point the
  connection calls); each key that needs more than a sum comes from a module of its own:
  :mod:`.exchanges` (``exchanges``; also ``format_exchanges`` for ``explain --analyze``), :mod:`.steals`
  (``steals``), :mod:`.join_filters` (``join_filters``), :mod:`.sort` (``sort`` and the ranks' peak rows),
  :mod:`.skipping` (``data_skipping``).

May import: :mod:`squall.plan` (the plan it reads), :mod:`squall.driver.options` (the planner's
defaults and units) and, below the driver, :mod:`squall.operators` for the ids of exchanges the workers
add (the range sort's sample round); nothing else in the driver — the planner, the catalog and the
platforms hand what they know to :func:`.stats.assemble` as plain values.
"""
