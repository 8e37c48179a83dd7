"""Core of the distributed planner: distributions, options, and the context that cuts stages.

A rule sees its input's :class:`Dist` (how the rows lie over the ranks) and asks
the :class:`Context` for an exchange only where it needs another one. The context
owns everything rules share: the stages cut so far, the inputs they read, and a
sandboxed DuckDB that type-checks every stage's SQL on empty inputs while planning,
so a planner bug fails here, not on a worker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

import duckdb
import pyarrow as pa
from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.frontend.bind import BoundQuery
from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import InputRef, render
from squall.driver.logical.translate import Names
from squall.driver.planner.exprs import hashable, leaves
from squall.driver.planner.joinfilter import BuiltFilter, JoinFilter, named_probes
from squall.driver.planner.reuse import stage_key
from squall.errors import NotSupportedError
from squall.operators.duck import Sandbox, raise_if_interrupted
from squall.plan import ExchangeInput, Output, ScanInput, Stage


@dataclass(frozen=True)
class PlannerOptions:
    """Knobs of the distributed planner (all sizes in bytes)."""

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
    #: with one worker, run the query as written in one DuckDB stage over Squall's scans (DuckDB plans
    #: the joins, subqueries and CTEs itself; the scans still prune, probe the predicate cache and
    #: count); off: Squall's own stage plan at W=1 too
    whole_query_at_w1: bool = True
    #: join sides drop the columns only their own filters read before they are sent (see driver/logical/rules/prune.py)
    narrow_join_sides: bool = True
    #: join filters (Bloom filter / key set of the build keys applied at the probe side's scans)
    join_filters: bool = True
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
    #: an EXISTS and a NOT EXISTS (or two of either) over one table on the same key read one scan, their
    #: own filters tested in the joins (TPC-H Q21; see driver/logical/rules/coalesce.py)
    coalesce_subqueries: bool = True
    #: an aggregate over a join whose many side is aggregated by the join key first (COUNT/SUM/MIN/MAX of
    #: its columns; TPC-H Q13; see driver/logical/rules/eager_aggregation.py)
    eager_aggregation: bool = True

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
    def setting(text: str) -> tuple[str, bool | float | int]:
        """``NAME=VALUE`` (e.g. ``skew_min_bytes=0``, ``join_filters=off``) as a (field, typed value) pair
        for ``dataclasses.replace``; ValueError with a one-line reason for an unknown name or a bad value."""
        name, sep, raw = text.partition("=")
        defaults = {f.name: getattr(PlannerOptions(), f.name) for f in dataclasses.fields(PlannerOptions)}
        if not sep or name not in defaults:
            raise ValueError(f"wants NAME=VALUE with NAME one of {', '.join(defaults)}; got {text!r}")
        default = defaults[name]
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


@dataclass(frozen=True)
class Dist:
    """Where an intermediate result lives.

    ``random``: disjoint parts on every rank; ``hash``: disjoint, equal ``keys`` on one
    rank (each key a set of equal SQL texts); ``replicated``: all of it on every rank;
    ``single``: all of it on rank 0.
    """

    kind: str  # random | hash | replicated | single
    keys: tuple[frozenset[str], ...] = ()
    #: hash from a skew-aware join (its co-partition group, :mod:`~squall.driver.planner.skew`): a rule
    #: that relies on the key partitioning calls :meth:`Context.rely_on` first
    group: int = 0

    def rename(self, mapping: dict[str, str]) -> Dist:
        """Follow hash keys through a projection (input SQL text → output SQL text)."""
        if self.kind != "hash":
            return self
        keys = []
        for eq in self.keys:
            kept = frozenset(mapping[k] for k in eq if k in mapping)
            if not kept:
                return Dist("random")
            keys.append(kept)
        return dataclasses.replace(self, keys=tuple(keys))


RANDOM = Dist("random")
SINGLE = Dist("single")
REPLICATED = Dist("replicated")


def hashed(texts: Iterable[str]) -> Dist:
    """Hash-partitioned on these key texts, one per key."""
    return Dist("hash", tuple(frozenset([t]) for t in texts))


class Context:
    """State of one planning run, shared by the rules.

    ``rules`` are modules with ``NODES`` (the logical node types they plan) and
    ``plan(ctx, node) -> (node, Dist)``; :meth:`build` runs the first that matches.
    ``replicate`` is set while a subtree is planned for every rank to read whole
    (a replicated scan, see :mod:`~squall.driver.planner.rules.scans`).
    """

    def __init__(
        self,
        catalog: Catalog,
        world_size: int,
        options: PlannerOptions | None,
        db: Sandbox | None,
        rules: tuple[ModuleType, ...],
    ) -> None:
        self.catalog = catalog
        self.world = world_size
        self.options = options or PlannerOptions()
        self.rules = rules
        self.replicate = False
        self.stages: list[Stage] = []
        self.schemas: dict[int, pa.Schema] = {}
        self.inputs: dict[str, ScanInput | ExchangeInput] = {}
        self.scan_schemas: dict[str, pa.Schema] = {}
        self.notes: list[str] = []
        self.scans = 0  # scan inputs named so far
        self.top_sort: L.Node | None = None  # the Sort ordering the query result (set by Planner.plan)
        #: subtrees planned ahead of their parent (id of the logical node → planned node, Dist)
        self.prebuilt: dict[int, tuple[L.Node, Dist]] = {}
        #: join filters to apply at scans (id of the logical Scan → filters), see planner/bloom.py
        self.join_filters: dict[int, list[JoinFilter]] = {}
        #: filter stages planned over a subtree's keys (id of the logical node → filters), for reuse
        self.filter_stages: dict[int, list[BuiltFilter]] = {}
        #: stages by canonical form (planner/reuse.py) → (stage id, the first consumer's input)
        self.reusable: dict[tuple[object, ...], tuple[int, InputRef]] = {}
        #: ids of stages read by more than one consumer through reuse (never skew-aware group members)
        self.shared: set[int] = set()
        self._names: Names | None = None
        self._own_db = db is None
        self._db = db if db is not None else Sandbox(threads=1)

    # --- the walk -----------------------------------------------------------------------------

    def build(self, node: L.Node, replicate: bool = False) -> tuple[L.Node, Dist]:
        """Plan ``node`` bottom-up: the first rule whose ``NODES`` match decides."""
        if id(node) in self.prebuilt:
            return self.prebuilt.pop(id(node))
        for rule in self.rules:
            if isinstance(node, rule.NODES):
                outer, self.replicate = self.replicate, replicate
                try:
                    return rule.plan(self, node)
                finally:
                    self.replicate = outer
        raise NotSupportedError(f"{type(node).__name__} in a distributed plan")

    def fresh(self, base: str) -> str:
        assert self._names is not None
        return self._names.fresh(base)

    # --- stages -------------------------------------------------------------------------------

    def typecheck(self, sql: str, refs: Iterable[InputRef]) -> tuple[pa.Schema, tuple[tuple[str, str], ...]]:
        """Schema and (name, DuckDB type) of ``sql`` run on empty ``refs``."""
        registered = []
        try:
            for leaf in refs:
                spec = self.inputs[leaf.name]
                schema = (
                    self.scan_schemas[leaf.name] if isinstance(spec, ScanInput) else self.schemas[spec.stage]
                )
                self._db.con.register(leaf.name, schema.empty_table())
                registered.append(leaf.name)
            try:
                rel = self._db.relation(sql)
                schema = rel.limit(0).to_arrow_table().schema
                types = tuple(zip(rel.columns, (str(t) for t in rel.types)))
            except duckdb.Error as err:
                raise_if_interrupted(err)
                raise NotSupportedError(
                    f"planner produced SQL DuckDB rejects ({str(err).splitlines()[0]})"
                ) from None
        finally:
            for name in registered:
                self._db.con.unregister(name)
        return schema, types

    def logical_types(self, node: L.Node) -> tuple[str, ...] | None:
        """DuckDB's types of the logical ``node`` bound as one query (scans as empty tables, no
        exchanges, no aggregate splits): what the node's columns are in DuckDB's own plan. ``None``
        when the subtree cannot be rendered on its own."""
        tables: dict[str, pa.Table] = {}

        def swap(n: L.Node) -> L.Node:
            if isinstance(n, L.Scan):
                info = self.catalog.table(n.table)
                name = f"__types_{len(tables)}"
                fields = [info.schema.field(src).with_name(internal) for src, internal in n.columns]
                tables[name] = pa.schema(fields).empty_table()
                return InputRef(name, n.names)
            return L.with_children(n, swap)

        registered = []
        try:
            sql = render(swap(node))
            for name, table in tables.items():
                self._db.con.register(name, table)
                registered.append(name)
            return tuple(str(t) for t in self._db.relation(sql).types)
        except duckdb.Error as err:
            raise_if_interrupted(err)
            return None
        except (NotSupportedError, KeyError, TypeError, ValueError):
            return None
        finally:
            for name in registered:
                self._db.con.unregister(name)

    def cast_to(self, node: L.Node, want: tuple[str, ...] | None) -> L.Node:
        """``node`` with each column whose DuckDB type is not ``want``'s cast to it."""
        if want is None:
            return node
        _schema, types = self.typecheck(render(node), leaves(node))
        if len(types) != len(want) or all(have == w for (_c, have), w in zip(types, want)):
            return node
        exprs: list[tuple[str, exp.Expression]] = []
        for name, (_c, have), w in zip(node.names, types, want):
            e: exp.Expression = L.col(name)
            if have != w:
                e = exp.cast(e, exp.DataType.build(w, dialect="duckdb"))
            exprs.append((name, e))
        return L.Project(node, tuple(exprs))

    def stage(self, node: L.Node, dist: Dist, output: Output, note: str = "", reuse: bool = True) -> L.Node:
        """Cut ``node`` into a stage whose output goes to ``output``; return the consumer's input (an
        :class:`InputRef`; with ``reuse``, an earlier equal stage's input renamed to ``node``'s columns when
        there is one, see planner/reuse.py)."""
        stage_id = len(self.stages) + 1
        refs = leaves(node)
        sql = render(node)
        ranks = (0,) if dist.kind == "single" or self.world == 1 else tuple(range(self.world))
        key = None
        if reuse and self.options.reuse_subplans:
            key = stage_key(sql, [self.inputs[leaf.name] for leaf in refs], ranks, output)
            if (earlier := self._reuse(key, node)) is not None:
                return earlier
        schema, types = self.typecheck(sql, refs)
        senders = (0,) if dist.kind in ("single", "replicated") else ranks
        receivers = (0,) if output.kind == "gather" else tuple(range(self.world))
        partition_sql = ""
        if output.kind == "hash":
            partition_sql = self._partition_sql(sql, output.keys, refs)
        out = dataclasses.replace(output, senders=senders, receivers=receivers, partition_sql=partition_sql)
        note += _one_rank_note(node)
        run_sql, probes = _with_named_probes(node, sql)
        inputs = tuple(self.inputs[leaf.name] for leaf in refs)
        stage = Stage(stage_id, ranks, inputs, run_sql, out, types, note, join_filters=probes)
        self.stages.append(stage)
        self.schemas[stage_id] = schema
        name = f"x{stage_id}"
        self.inputs[name] = ExchangeInput(name, stage_id)
        wide = tuple((n, t) for n, (_c, t) in zip(node.names, types) if t in ("HUGEINT", "UHUGEINT"))
        ref = InputRef(name, node.names, wide)
        if key is not None:
            self.reusable[key] = (stage_id, ref)
        return ref

    def _reuse(self, key: tuple[object, ...], node: L.Node) -> L.Node | None:
        """The input of an earlier stage of canonical form ``key`` renamed to ``node``'s columns, else None (also
        when that stage became a skew-aware group member since: its partitioning is no longer plain)."""
        found = self.reusable.get(key)
        if found is None:
            return None
        sid, ref = found
        index = next(i for i, s in enumerate(self.stages) if s.id == sid)
        stage = self.stages[index]
        if stage.output.partitions or stage.output.runtime_join:
            del self.reusable[key]
            return None
        if sid not in self.shared:
            self.shared.add(sid)
            note = (
                stage.note + "; computed once: the same subplan elsewhere in the query reads this output too"
            )
            self.stages[index] = dataclasses.replace(stage, note=note)
        if ref.out == node.names:
            return ref
        return L.Project(ref, tuple((new, L.col(old)) for new, old in zip(node.names, ref.out)))

    def _partition_sql(self, sql: str, keys: tuple[str, ...], refs: list[InputRef]) -> str:
        """``hash(keys) % W``, keys as ``hashable`` gives them."""
        key_sql = ", ".join(keys)
        _schema, types = self.typecheck(f"SELECT {key_sql} FROM ({sql}) AS t", refs)
        parts = [hashable(key, typ) for key, (_name, typ) in zip(keys, types)]
        return f"hash({', '.join(parts)}) % {self.world}"

    def gather(self, node: L.Node, dist: Dist, note: str) -> L.Node:
        return self.stage(node, dist, Output("gather"), note)

    def to_hash(
        self, node: L.Node, dist: Dist, keys: tuple[exp.Expression, ...], note: str, exact: bool = True
    ) -> tuple[L.Node, Dist]:
        """Make ``node`` hash-partitioned on ``keys`` (no-op when it already is; ``exact`` as in
        :meth:`rely_on`)."""
        texts = tuple(L.sql_of(k) for k in keys)
        if self.world == 1:
            return node, hashed(texts)
        if (
            dist.kind == "hash"
            and len(dist.keys) == len(texts)
            and all(t in eq for t, eq in zip(texts, dist.keys))
        ):
            self.rely_on(dist, exact)
            return node, dist
        ref = self.stage(node, dist, Output("hash", keys=texts), note)
        return ref, hashed(texts)

    def rely_on(self, dist: Dist, exact: bool = True) -> None:
        """A rule uses ``dist``'s key partitioning as it is. If a skew-aware join produced it: with ``exact``
        (another input is hashed to match, e.g. a co-located join's other side) that join's exchanges fall
        back to plain ``hash % W``; otherwise (an aggregate or window in place: every key's rows on one rank
        is all it needs) they keep the histogram assignment but neither spread hot keys (selective
        broadcast) nor broadcast a side at run time."""
        if not dist.group:
            return
        if any(s.output.runtime_join == dist.group for s in self.stages):
            self.drop_runtime_join(dist.group, "a later step uses this join's key partitioning")
            return
        for i, s in enumerate(self.stages):
            out = s.output
            if exact and out.group == dist.group and out.split_ranges:  # the other input is hashed
                plain = dataclasses.replace(out, group=0, split_ranges=())
                note = s.note + "; by hash, not key ranges: a later step uses this key partitioning"
                self.stages[i] = dataclasses.replace(s, output=plain, note=note)
                continue
            if not exact and out.group == dist.group and out.partitions:
                if out.heavy or out.broadcast_limit:
                    kept = dataclasses.replace(out, heavy="", broadcast_limit=0.0, null_sql="")
                    note = s.note + "; hot keys not spread: a later step keeps this join's key partitioning"
                    self.stages[i] = dataclasses.replace(s, output=kept, note=note)
                continue
            if out.group == dist.group and out.partitions:
                plain = dataclasses.replace(
                    out, partitions=0, group=0, heavy="", partition_sql=f"{out.partition_sql} % {self.world}",
                    range_sql="", range_lo=0, range_hi=0, null_sql="",
                )  # fmt: skip
                note = s.note + "; skew handling off: a later step uses this join's key partitioning"
                self.stages[i] = dataclasses.replace(s, output=plain, note=note)

    def drop_runtime_join(self, join: int, why: str) -> None:
        """Turn the run-time join decision ``join`` (planner/runtime.py) back into the planned hash (``why``: the
        reason, for readers of the code; the plan is then exactly the one planned without the decision, its note
        dropped)."""
        for i, s in enumerate(self.stages):
            if s.output.runtime_join == join:
                out = dataclasses.replace(s.output, runtime_join=0, runtime_role="", runtime_limit=0.0)
                self.stages[i] = dataclasses.replace(s, output=out)
        self.notes[:] = [n for n in self.notes if f"actual size of stage {join}'s output" not in n]

    def result_stage(self, node: L.Node, bound: BoundQuery, ranks: tuple[int, ...] = (0,)) -> Stage:
        """The last stage, on rank 0 (or one part per rank of ``ranks``, in rank order), cast to
        exactly the types DuckDB gives the whole query."""
        refs = leaves(node)
        sql = render(node)
        _schema, types = self.typecheck(sql, refs)
        if tuple(t for _n, t in types) != bound.types:
            exprs = []
            for (name, have), want in zip(types, bound.types):
                e: exp.Expression = L.col(name)
                if have != want:
                    e = exp.cast(e, exp.DataType.build(want, dialect="duckdb"))
                exprs.append((name, e))
            if isinstance(node, L.Project):
                inner = dict(node.exprs)
                merged = []
                for name, e in exprs:
                    if isinstance(e, exp.Cast):
                        e = exp.cast(inner[name].copy(), e.to)
                    else:
                        e = inner[name]
                    merged.append((name, e))
                node = L.Project(node.input, tuple(merged))
            else:
                node = L.Project(node, tuple(exprs))
            sql = render(node)
            _schema, types = self.typecheck(sql, refs)
        run_sql, probes = _with_named_probes(node, sql)
        return Stage(
            len(self.stages) + 1,
            ranks,
            tuple(self.inputs[leaf.name] for leaf in refs),
            run_sql,
            Output("result", ranks, (0,)),
            types,
            "final result" + _one_rank_note(node),
            join_filters=probes,
        )

    def fix_receivers(self) -> None:
        """Broadcasts go only to the ranks of the stages that consume them."""
        users: dict[int, set[int]] = {}
        for stage in self.stages:
            for inp in stage.inputs:
                if isinstance(inp, ExchangeInput):
                    users.setdefault(inp.stage, set()).update(stage.ranks)
        for i, stage in enumerate(self.stages):
            ranks = tuple(sorted(users.get(stage.id, ())))
            if ranks and stage.output.kind == "broadcast" and ranks != stage.output.receivers:
                output = dataclasses.replace(stage.output, receivers=ranks)
                self.stages[i] = dataclasses.replace(stage, output=output)


def _with_named_probes(node: L.Node, sql: str) -> tuple[str, tuple[tuple[str, str, str, str], ...]]:
    """A stage's SQL (``sql`` renders ``node``) with its join filters read by name, and the filters
    (see :func:`~squall.driver.planner.joinfilter.named_probes`)."""
    named, probes = named_probes(node)
    return (render(named) if probes else sql), probes


def _one_rank_note(node: L.Node) -> str:
    """What of this stage's work runs on one rank only because it has no distributed plan."""
    found: list[str] = []

    def walk(n: L.Node) -> None:
        if isinstance(n, L.OneRank):
            found.append(n.reason)
        for c in n.children:
            walk(c)

    walk(node)
    return "".join(
        f"; {reason}"
        if reason == L.WHOLE_QUERY_AT_W1
        else f"; on rank 0 only: {reason} (no distributed plan)"
        for reason in found
    )
