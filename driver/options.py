"""What planning may be told, and how its rules run.

:class:`PlannerOptions` holds the rules disabled by name and every knob of the rules. A *rule* is a module
of a ``RULES`` tuple — :mod:`squall.driver.sql` (rewrites of the parsed query), :mod:`squall.driver.logical.rules`
(rewrites of the logical plan) and :mod:`squall.driver.planner` (one module per kind of logical node) — with:

- ``NAME``: how stats, explain and ``disabled_rules`` call it (by convention its module's name);
- a module docstring with an example (for SQL rules a doctest, run by ``tests/test_rule_fixtures.py``);
- ``apply(subject, context)`` (``sql`` and ``logical`` rules: the tree in, the rewritten tree out) or
  ``NODES`` + ``plan(ctx, node)`` (planner rules: the first whose node types match plans a node);
- ``REQUIRED = True`` when the pipeline cannot do without it (disabling it is refused);
- a fixture file of cases, ``tests/fixtures/<stage>/<NAME>.sql``.

:func:`run_rules` runs one ``RULES`` tuple as DuckDB's optimizer runs its passes: each rule timed into the
query's planning breakdown under ``<stage>.<NAME>_s``, skipped when disabled, and followed by a check that it
kept the query's result columns (DuckDB's ``Verify``, DataFusion's schema check): a rule that changes them is a
bug, reported as one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")


def rule_name(rule: ModuleType) -> str:
    """The name a rule module goes by: its ``NAME``, else its module's last name."""
    return str(getattr(rule, "NAME", rule.__name__.rsplit(".", 1)[-1]))


def unknown_rules(options: PlannerOptions, *rule_lists: Iterable[ModuleType]) -> str:
    """A one-line reason when ``options.disabled_rules`` names a rule none of ``rule_lists`` has or one that is
    required; "" when every name is fine."""
    rules = {rule_name(r): r for rules in rule_lists for r in rules}
    for name in options.disabled_rules:
        if name not in rules:
            return f"disabled_rules: no rule named {name!r} (rules: {', '.join(sorted(rules))})"
        if getattr(rules[name], "REQUIRED", False):
            return f"disabled_rules: {name!r} is required and cannot be disabled"
    return ""


def run_rules(
    stage: str,
    rules: Iterable[ModuleType],
    subject: T,
    context: Any,
    options: PlannerOptions,
    breakdown: dict[str, float],
    schema: Callable[[T], object | None],
) -> T:
    """``subject`` rewritten by each enabled rule of ``rules`` in order (``rule.apply(subject, context)``).

    Each rule's seconds go to ``breakdown["<stage>.<NAME>_s"]``; ``schema(subject)`` (the result columns, or
    None while they are not known yet, as for a ``*`` before qualification) must be the same after each rule as
    before it, else AssertionError names the rule (a bug: the error boundary turns it into an InternalError
    line)."""
    before = schema(subject)
    for rule in rules:
        name = rule_name(rule)
        if not options.enabled(name):
            continue
        start = time.perf_counter()
        subject = rule.apply(subject, context)
        key = f"{stage}.{name}_s"
        breakdown[key] = breakdown.get(key, 0.0) + time.perf_counter() - start
        after = schema(subject)
        if before is not None and after is not None:
            assert after == before, f"{stage} rule {name} changed the result columns: {before!r} -> {after!r}"
        before = after if after is not None else before
    return subject


@dataclass(frozen=True)
class PlannerOptions:
    """What planning may be told: the rules disabled by name, and the knobs of the rules (sizes in bytes).

    Immutable and hashable (a plan cache key). ``disabled_rules`` names rules of any ``RULES`` tuple
    (``squall.driver.sql``, ``squall.driver.logical.rules``, ``squall.driver.planner``); a rule that only
    switched on or off has no flag of its own here.
    """

    #: rules to skip, by name (e.g. ``("coalesce", "join_filters")``); checked against every RULES tuple by
    #: :func:`squall.driver.compile.compile_sql`
    disabled_rules: tuple[str, ...] = ()

    #: broadcast a join side when it is at most this big …
    broadcast_limit: float = 256e6
    #: … and its W copies cost less than shuffling the other side
    broadcast_factor: float = 1.0
    #: finish an aggregation on rank 0 when it has at most this many groups
    gather_groups: float = 200_000
    #: DISTINCT aggregates of one argument move their deduped (group keys, value) pairs by the group keys
    #: alone and complete where they land when the catalog's NDVs promise at least this many groups per
    #: rank and the pairs are estimated under ``skew_min_bytes`` (with skew handling on); otherwise by
    #: (keys, value), so that a hot group's values spread
    distinct_by_keys_groups: float = 1024
    #: replicated scans (every rank reads a small table itself, no exchange) instead of a
    #: broadcast, when the tables read hold at most this many rows in all (before filters:
    #: every rank pays for the whole scan)
    replicated_scan_rows: float = 250_000
    #: work stealing of scan splits (I-Store; ``driver/planner/steal.py``): ranks that finish their
    #: row groups early steal unread ones from the others, one row group at a time
    work_stealing: bool = False
    #: range-partition an ORDER BY without LIMIT over all ranks (instead of sorting on rank 0)
    #: when its input has at least this many estimated rows (driver/planner/rules/sort.py)
    range_sort_rows: float = 1_000_000
    #: skip row groups where the predicate cache knows an implied predicate matched no row, and have
    #: workers record the outcome of row groups it does not know (see squall.driver.skipping.predicate_cache)
    predicate_cache: bool = True
    #: … but probe a scan only when the planner expects at most this many of an average row group's rows
    #: to pass its filters (more: the row group is very unlikely to be empty, and the probe re-reads the
    #: filter columns); the cache is still used either way
    probe_rows_per_group: float = 1000.0
    #: skip row groups whose Parquet Bloom filters rule out every value of an = / IN conjunct
    bloom_filters: bool = True
    #: skip row groups whose Parquet page indexes show no page (of every filtered column at once) whose
    #: [min, max] meets the scan's range / = / IN conjuncts (see driver/planner/skipping.py)
    page_index: bool = True
    #: skew-aware hash joins (Neo-Join, :mod:`~squall.driver.planner.skew`): histogram round, partition
    #: assignment with locality, selective broadcast of heavy hitters; off = plain ``hash % W``
    skew_handling: bool = True
    #: … only for joins whose two sides are estimated at least this big (the histogram round costs a
    #: round trip: on Lambda one more S3 write and read)
    skew_min_bytes: float = 64e6
    #: … times this: how many ranks of the plan share one core; 0 = as the platform says (the connection
    #: sets W / cores for more local workers than cores, else 1). The histogram round is a barrier that
    #: idles ranks which would otherwise overlap stages on shared cores (measured on 2 cores: 21 ms at
    #: W=2, 257 ms at W=8); see :attr:`skew_threshold`
    ranks_per_core: float = 0.0
    #: … with this many radix partitions per rank
    skew_partitions_per_rank: int = 32
    #: … and only while one rank's share of the group's estimated bytes is at most this (0: no limit): a
    #: skew-aware exchange holds every member's output until the histogram round (past a share of the worker's
    #: memory budget on disk), where a plain one streams it out a batch at a time
    held_limit: float = 0.0
    #: … and the join broadcasts a side instead when, at run time, its actual bytes are at most
    #: ``broadcast_limit`` and broadcasting moves fewer bytes than hashing both sides
    runtime_broadcast: bool = True
    #: run-time join decisions (planner/runtime.py, operators/runtime_join.py): a join whose side that may be
    #: broadcast has an estimate resting on guesses (LIKE, OR, a GROUP BY, HAVING, a semi join, a filter above a
    #: join) within ``runtime_join_spread`` times of the broadcast threshold either way is hash-partitioned or
    #: broadcast as that side's actual size, shared before its rows move, decides
    runtime_join: bool = True
    #: … the factor by which such an estimate may be off
    runtime_join_spread: float = 10.0
    #: … when the other side (what a broadcast keeps in place) is estimated at least this big
    runtime_join_min_bytes: float = 1e6
    #: … and, keyed by one integer column whose range the catalog knows, may partition by key range instead
    #: of hash when that balances as well and keeps more bytes in place (locality: data clustered by the key stays)
    skew_locality_ranges: bool = True
    #: an equi-join whose sides each read a table written in key order (Parquet statistics) splits both
    #: scans by ranges of the key and joins where the rows are read, no exchange (planner/colocate.py) …
    join_in_place: bool = True
    #: … for joins of every kind; off: semi and anti joins only (EXISTS / IN). Measured (TPC-H, W=2, same
    #: run): semi joins win at SF1 and SF10 (Q4 1.88x → 1.27x, SF10 1.26x → 0.97x DuckDB); inner joins with
    #: selective filters on a side lost at SF10 (Q21 0.86x → 1.95x, Q12 1.22x → 1.55x): in one stage,
    #: DuckDB orders the joins and picks build sides from its estimates over the Parquet scans (it joined
    #: lineitem with orders before the one-nation supplier filter), where after an exchange it sees exact sizes
    join_in_place_every_kind: bool = False
    #: … also instead of broadcasting a side that is not a replicated scan
    join_in_place_over_broadcast: bool = True
    #: … when no rank reads more than this times the mean rows (estimated, rows even within a row group)
    colocate_max_imbalance: float = 1.25
    #: … and the row groups read by two ranks (straddling a bound) add at most this share of rows
    colocate_max_overlap: float = 0.5
    #: a GROUP BY one of whose keys each rank's scan splits hold a range of their own (Parquet statistics: data
    #: written in key order) completes on every rank, with no exchange (off: its partial groups go by those ranges)
    aggregate_in_place: bool = True
    #: … when the row groups read by two ranks add at most this share of rows: in place, an aggregate saves only
    #: the exchange of its partial groups, where a join saves both its sides' (TPC-DS SF10 Q39 read inventory's
    #: 1,084 row groups split by warehouse with 521 of them read by both ranks: 3.3 s, 14.5x DuckDB)
    aggregate_in_place_max_overlap: float = 0.1
    #: with one worker, run the query as written in one DuckDB stage over Squall's scans (DuckDB plans
    #: the joins, subqueries and CTEs itself; the scans still prune, probe the predicate cache and
    #: count); off: Squall's own stage plan at W=1 too
    whole_query_at_w1: bool = True
    #: join sides drop the columns only their own filters read before they are sent (see driver/logical/rules/prune.py)
    narrow_join_sides: bool = True
    #: … only when the build side keeps at most this share of the probe rows (estimated)
    join_filter_max_keep: float = 0.3
    #: a build key (nearly) unique in its table (NDV / rows at least this) or a GROUP BY key: its distinct
    #: values are estimated from the build side's share of the table's rows; otherwise at most one per row
    join_filter_min_key_share: float = 0.9
    #: … and the bytes saved exceed the filter's bytes plus this much for the extra exchange round
    join_filter_round_bytes: float = 1e6
    #: an exact key set (8 bytes a key) when the build side is estimated at most this many rows, else a
    #: Bloom filter (~1.3-2 bytes a key). A key set probes as one hash semi join, which DuckDB also turns
    #: into a min/max filter at the scan; the SQL Bloom filter probes as one join per hash function: on
    #: 3.8M SF1 lineitem rows against one quarter's 57k orders, 36 ms vs 250 ms in one thread; TPC-H SF10 at
    #: W=2, Q4 (570k keys) 1.14 s vs 3.24 s (2.19 s without a filter), Q18 (570 keys, estimated 2.8M)
    #: 4.2 s vs 5.1 s (8.1 s without)
    join_filter_exact_keys: float = 1 << 22
    #: a stage equal to one already cut (a subquery read twice, up to column names) reads that stage's
    #: exchange instead of computing it again (see planner/reuse.py)
    reuse_subplans: bool = True

    def enabled(self, rule: str) -> bool:
        """Whether the rule named ``rule`` runs."""
        return rule not in self.disabled_rules

    @property
    def skew_threshold(self) -> float:
        """The estimated input bytes from which joins and aggregates are skew-aware: ``skew_min_bytes``
        scaled by :attr:`ranks_per_core`."""
        return self.skew_min_bytes * max(1.0, self.ranks_per_core)

    def per_core(self) -> str:
        """`` x N ranks per core`` when :attr:`skew_threshold` is scaled, for the plan's notes; else ""."""
        return f" x {self.ranks_per_core:g} ranks per core" if self.ranks_per_core > 1.0 else ""

    def below_skew_threshold(self, est_bytes: float) -> str:
        """Why an input of ``est_bytes`` keeps plain hashing although it reaches ``skew_min_bytes``
        (the ranks share cores), for the plan's notes; "" when that is not the reason."""
        if self.skew_min_bytes <= est_bytes < self.skew_threshold:
            return (
                f"~{megabytes(est_bytes)} < skew_min_bytes {megabytes(self.skew_min_bytes)}{self.per_core()} "
                "(more workers than cores: the histogram round is a barrier)"
            )
        return ""

    @staticmethod
    def setting(text: str) -> tuple[str, bool | float | int | tuple[str, ...]]:
        """``NAME=VALUE`` (e.g. ``skew_min_bytes=0``, ``join_in_place=off``,
        ``disabled_rules=coalesce+join_filters``) as a (field, typed value) pair
        for ``dataclasses.replace``; ValueError with a one-line reason for an unknown name or a bad value."""
        name, sep, raw = text.partition("=")
        defaults = {f.name: getattr(PlannerOptions(), f.name) for f in dataclasses.fields(PlannerOptions)}
        if not sep or name not in defaults:
            raise ValueError(f"wants NAME=VALUE with NAME one of {', '.join(defaults)}; got {text!r}")
        default = defaults[name]
        if isinstance(default, tuple):  # rule names, joined by "+"
            return name, tuple(n.strip() for n in raw.split("+") if n.strip())
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false", "1", "0", "on", "off"):
                raise ValueError(f"{name} is true or false, got {raw!r}")
            return name, raw.lower() in ("true", "1", "on")
        try:
            return name, int(raw) if isinstance(default, int) else float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{name} wants a {type(default).__name__}, got {raw!r}") from None


def megabytes(nbytes: float) -> str:
    """``nbytes`` as MB for plan notes: two decimals under 10 MB, whole MB above."""
    return f"{nbytes / 1e6:.2f} MB" if nbytes < 1e7 else f"{nbytes / 1e6:,.0f} MB"
