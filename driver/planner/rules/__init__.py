"""The planner's rules: one module per kind of logical node, run in the order of :data:`squall.driver.planner.RULES`.

Each rule module has ``NODES`` (the :mod:`~squall.driver.ir.nodes` types it plans) and ``plan(ctx, node)``,
which builds the node's inputs through ``ctx.build`` (bottom-up) and returns the planned node with how its
rows lie over the ranks (a :class:`~squall.driver.planner.core.Dist`), cutting a stage (an exchange) only
where the node needs another distribution. ``ctx.build`` gives a node to the first rule in ``RULES`` whose
``NODES`` match and that ``PlannerOptions.disabled_rules`` does not name, and times each rule on its own.
The order, ``scans, filters, join_filters, joins, aggregates, sort, topk, setops, windows, onerank``:

:mod:`.scans` first, for the leaves (``Scan``, ``Values``): every other rule starts from what the scans
produce. A scan is split by row group (after the data skipping of :mod:`squall.driver.skipping`) into W
contiguous parts, one per rank, with no exchange; a small join side is read whole by every rank instead
(replicated), and :mod:`squall.driver.planner.steal` marks the split scans whose splits ranks may steal.

:mod:`.filters` next (``Filter``, ``Project`` and its ``Narrow``): row-wise, planned in place. A projection
renames the hash keys it passes through, so the joins and aggregates above still see a co-partitioned input.

:mod:`.join_filters` before :mod:`.joins`: the only two rules with the same ``NODES`` (``Join``), so the
order is what lets the first decide. It plans a join's build side first and, when a Bloom filter or key
set of its keys pays, sends it to the probe side's scans before they are built (a small extra stage, or
none for a replicated build side); then, or when it declines, the join goes to :mod:`.joins`. Disabled,
every join goes straight to :mod:`.joins` (the only rule that may be left out: every other rule is the
only one for its node types).

:mod:`.joins`: broadcast the small side, join in place where both sides are read in key order
(:mod:`squall.driver.planner.colocate`), hash only the side not yet partitioned on the keys, or hash both
(skew-aware: :mod:`squall.driver.planner.skew`); near the broadcast threshold on a guessed estimate, the
choice is left to run time (:mod:`squall.driver.planner.runtime`). A keyless join too big to broadcast
runs on rank 0.

:mod:`.aggregates`: complete in place when the input is already partitioned on a subset of the group keys;
else partial on every rank, an exchange (gather for few groups, hash otherwise), final; aggregates that
cannot be split move their rows first (DISTINCT ones of one argument in two steps).

:mod:`.sort` (``Sort`` without a LIMIT): gathered and sorted on rank 0, or range-partitioned over all ranks
when a large result is ordered (each rank sorts its key range; the result is the parts in rank order).

:mod:`.topk` (``Limit``, with the ``Sort`` under it): a local top-k or LIMIT on every rank, then the global
one on rank 0. It plans the ``Sort`` under its ``Limit`` itself, so :mod:`.sort` sees only ORDER BY without
LIMIT; the two never compete for a node.

:mod:`.setops`: UNION ALL in place; UNION, INTERSECT and EXCEPT hash every input on all its columns (equal
rows meet on one rank), cast to the query's types where they are combined.

:mod:`.windows`: hash-partitioned by the PARTITION BY keys, or gathered to rank 0 without them.

:mod:`.onerank` last: the fallback for a part of the query with no distributed plan (a ``OneRank`` node, made
by :mod:`squall.driver.logical.fallback`): its inputs are gathered to rank 0 and DuckDB runs the part's own
SQL there, said in the plan's notes.

Apart from the two join rules, the ``NODES`` are disjoint, so the rest of the order changes no plan: it
reads bottom-up (leaves, row-wise operators, joins, aggregation, ordering, limits, set operations,
windows), with the fallback last. The mechanisms the rules share (distributions and stages in
:mod:`squall.driver.planner.core`, skew, co-location, run-time joins, stage reuse, data skipping) live in
:mod:`squall.driver.planner`, beside ``RULES``.
"""
