"""The driver: SQL text → a distributed plan, and the platforms that run it.

A compiler with named stages; :mod:`.compile` shows the whole pipeline and nothing else:

    bind (:mod:`.frontend`) → SQL rules (:mod:`.sql`) → translate (:mod:`.logical`) →
    logical rules (:mod:`.logical.rules`) → planner rules (:mod:`.planner`)

Each stage is a package whose docstring says what lives there and what it may import. Below the stages:
:mod:`.estimate` (rows, selectivity, join order), :mod:`.skipping` (min/max, page indexes, Bloom filters, the
predicate cache, metadata mirrors), :mod:`.ir` (the logical IR and its SQL), :mod:`.catalog` (tables, table
sources, snapshots, scan kinds) and :mod:`.options` (``PlannerOptions`` and the rule interface). Beside them:
:mod:`.report` (stats and explain), :mod:`.forecast` (what a plan will cost, the SimPy scale model) and
:mod:`.platforms` (where the W workers run, each platform with its worker-side entry point).

May import: :mod:`squall.operators`, :mod:`squall.exchange`, :mod:`squall.plan`, :mod:`squall.aws`,
:mod:`squall.registry`, :mod:`squall.errors` — never the SDK (``squall.connection``, ``squall.client``…),
the service or the functions (``make check-arch`` enforces it, and the order of the stages inside).
"""
