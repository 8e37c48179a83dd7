"""Core of the distributed planner: distributions and the context that cuts stages.

A rule sees its input's :class:`Dist` (how the rows lie over the ranks) and asks
the :class:`Context` for an exchange only where it needs another one. The context
owns everything rules share: the stages cut so far, the inputs they read, and a
sandboxed DuckDB that type-checks every stage's SQL on empty inputs while planning,
so a planner bug fails here, not on a worker.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

import duckdb
import pyarrow as pa
from sqlglot import exp

from squall.driver.catalog.tables import Catalog
from squall.driver.frontend import value_lists
from squall.driver.frontend.bind import BoundQuery
from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import InputRef, q, render
from squall.driver.logical.translate import Names
from squall.driver.options import PlannerOptions, rule_name
from squall.driver.planner.bound_types import bound_types
from squall.driver.planner.column_types import types_off_the_plan
from squall.driver.planner.exprs import hashable, leaves
from squall.driver.planner.joinfilter import BuiltFilter, JoinFilter, named_probes
from squall.driver.planner.repeats import repeats_note, share_repeats
from squall.driver.planner.reuse import stage_key
from squall.errors import NotSupportedError
from squall.operators.duck import Sandbox, raise_if_interrupted, typed_empty
from squall.plan import ExchangeInput, Output, ScanInput, Stage


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
        breakdown: dict[str, float] | None = None,
    ) -> None:
        self.catalog = catalog
        #: seconds per rule (``planner.<NAME>_s``), each rule's own time without the subtrees it had built
        self.breakdown = breakdown if breakdown is not None else {}
        self._nested: list[float] = []  # per rule being run: seconds its nested builds took
        self.world = world_size
        self.options = options or PlannerOptions()
        self.rules = rules
        self.replicate = False
        self.stages: list[Stage] = []
        self.stage_types: dict[int, tuple[tuple[str, str], ...]] = {}  # each stage's (column, DuckDB type)
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
            if isinstance(node, rule.NODES) and self.options.enabled(rule_name(rule)):
                outer, self.replicate = self.replicate, replicate
                try:
                    return self.delegate(rule, node)
                finally:
                    self.replicate = outer
        raise NotSupportedError(f"{type(node).__name__} in a distributed plan")

    def delegate(self, rule: ModuleType, node: L.Node) -> tuple[L.Node, Dist]:
        """``rule.plan(self, node)``, its own time (without the subtrees it builds) added to the breakdown under
        the rule's name; also how a rule hands a node it declines to the rule that plans it instead."""
        start = time.perf_counter()
        self._nested.append(0.0)
        try:
            planned, dist = rule.plan(self, node)
            assert tuple(planned.names) == tuple(node.names), (  # the plan's schema check after each rule
                f"planner rule {rule_name(rule)} changed the columns of {type(node).__name__}: "
                f"{node.names} -> {planned.names}"
            )
            return planned, dist
        finally:
            spent, nested = time.perf_counter() - start, self._nested.pop()
            key = f"planner.{rule_name(rule)}_s"
            self.breakdown[key] = self.breakdown.get(key, 0.0) + spent - nested
            if self._nested:
                self._nested[-1] += spent

    def fresh(self, base: str) -> str:
        assert self._names is not None
        return self._names.fresh(base)

    # --- stages -------------------------------------------------------------------------------

    def input_types(self, name: str) -> tuple[tuple[str, str], ...]:
        """(column, DuckDB type) of the input ``name``: a scan's as DuckDB reads its Arrow schema, a stage's
        as :meth:`typecheck` found them."""
        spec = self.inputs[name]
        if isinstance(spec, ScanInput):
            schema = self.scan_schemas[name]
            return tuple(zip(schema.names, self._db.arrow_types(schema)))
        types = self.stage_types[spec.stage]
        if spec.columns:
            return tuple((name, t) for name, (_c, t) in zip(spec.columns, types, strict=True))
        return types

    def typecheck(self, sql: str, refs: Iterable[InputRef]) -> tuple[tuple[str, str], ...]:
        """(name, DuckDB type) of each column of ``sql`` run on empty ``refs``.

        DuckDB binds ``sql`` behind a ``WITH`` of one empty CTE per input, over an empty table of its columns kept
        in the sandbox's instance (:meth:`Sandbox.typed_inputs`: a bind, no run, nothing registered; ~0.5 ms where
        registering empty Arrow tables and running took ~4 ms; a text bound before up to column names is not bound
        again, :mod:`~squall.driver.planner.bound_types`); when that text fails,
        the inputs are registered as empty tables instead, and DuckDB's error on it is the one reported."""
        refs = list(refs)
        typed = self._db.typed_inputs({leaf.name: self.input_types(leaf.name) for leaf in refs}, sql)
        if typed is not None:
            try:
                return bound_types(self._db.relation, typed)
            except duckdb.Error as err:
                raise_if_interrupted(err)
        return self._typecheck_registered(sql, refs)

    def node_types(
        self, node: L.Node, sql: str | None = None, refs: list[InputRef] | None = None
    ) -> tuple[tuple[str, str], ...]:
        """(name, DuckDB type) of each column of the planned ``node`` (rendered as ``sql`` over ``refs`` when
        given): read off the plan where DuckDB's rules are plain (planner/column_types.py), else
        :meth:`typecheck`."""
        derived = types_off_the_plan(node, self.input_types)
        if derived is not None:
            return derived
        return self.typecheck(render(node) if sql is None else sql, leaves(node) if refs is None else refs)

    def _typecheck_registered(self, sql: str, refs: list[InputRef]) -> tuple[tuple[str, str], ...]:
        registered = []
        try:
            for leaf in refs:
                self._db.con.register(leaf.name, self._empty_input(leaf.name))
                registered.append(leaf.name)
            try:
                rel = value_lists.typed_relation(self._db.relation, sql)
                rel.limit(0).to_arrow_table()
                return tuple(zip(rel.columns, (str(t) for t in rel.types)))
            except duckdb.Error as err:
                raise_if_interrupted(err)
                raise NotSupportedError(
                    f"planner produced SQL DuckDB rejects ({str(err).splitlines()[0]})"
                ) from None
        finally:
            for name in registered:
                self._db.con.unregister(name)

    def _empty_input(self, name: str) -> pa.Table:
        if isinstance(self.inputs[name], ScanInput):
            return self.scan_schemas[name].empty_table()
        select = typed_empty(self.input_types(name))
        return self._db.query(select) if select else pa.table({})

    def logical_types(self, node: L.Node) -> tuple[str, ...] | None:
        """DuckDB's types of the logical ``node`` bound as one query (scans as empty inputs, no
        exchanges, no aggregate splits): what the node's columns are in DuckDB's own plan. ``None``
        when the subtree cannot be rendered on its own."""
        tables: dict[str, tuple[tuple[str, str], ...]] = {}

        def swap(n: L.Node) -> L.Node:
            if isinstance(n, L.Scan):
                info = self.catalog.table(n.table)
                of = dict(zip(info.schema.names, self._db.arrow_types(info.schema)))
                name = f"__types_{len(tables)}"
                tables[name] = tuple((internal, of[src]) for src, internal in n.columns)
                return InputRef(name, n.names)
            return L.with_children(n, swap)

        try:
            sql = render(swap(node))
            typed = self._db.typed_inputs(tables, sql)
            if typed is None:
                return None
            return tuple(t for _name, t in bound_types(self._db.relation, typed))
        except duckdb.Error as err:
            raise_if_interrupted(err)
            return None
        except (NotSupportedError, KeyError, TypeError, ValueError):
            return None

    def cast_to(self, node: L.Node, want: tuple[str, ...] | None) -> L.Node:
        """``node`` with each column whose DuckDB type is not ``want``'s cast to it."""
        if want is None:
            return node
        types = self.node_types(node)
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
        node = share_repeats(node, self.inputs)
        refs = leaves(node)
        sql = render(node)
        ranks = (0,) if dist.kind == "single" or self.world == 1 else tuple(range(self.world))
        key = None
        if reuse and self.options.reuse_subplans:
            key = stage_key(sql, [self.inputs[leaf.name] for leaf in refs], ranks, output)
            if (earlier := self._reuse(key, node)) is not None:
                return earlier
        types = self.node_types(node, sql, refs)
        senders = (0,) if dist.kind in ("single", "replicated") else ranks
        receivers = (0,) if output.kind == "gather" else tuple(range(self.world))
        partition_sql = ""
        if output.kind == "hash":
            partition_sql = self._partition_sql(sql, output.keys, refs, types)
        out = dataclasses.replace(output, senders=senders, receivers=receivers, partition_sql=partition_sql)
        note += _one_rank_note(node) + repeats_note(node)
        run_sql, probes = _with_named_probes(node, sql)
        inputs = tuple(self.inputs[leaf.name] for leaf in refs)
        stage = Stage(stage_id, ranks, inputs, run_sql, out, types, note, join_filters=probes)
        self.stages.append(stage)
        self.stage_types[stage_id] = types
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
        # read under the reader's own names (not a renaming projection over it): a stage above that is the same
        # as one above the first reader then has the same canonical form, and is computed once too
        alias = f"{ref.name}_{sum(1 for n in self.inputs if n.startswith(ref.name + '_')) + 1}"
        self.inputs[alias] = ExchangeInput(alias, sid, columns=node.names)
        renamed = dict(zip(ref.out, node.names))
        return InputRef(alias, node.names, tuple((renamed[c], t) for c, t in ref.casts))

    def _partition_sql(
        self, sql: str, keys: tuple[str, ...], refs: list[InputRef], columns: tuple[tuple[str, str], ...]
    ) -> str:
        """``hash(keys) % W``, keys as ``hashable`` gives them; a key that is one of the stage's output
        ``columns`` (name, DuckDB type) has that type, others are typed by DuckDB."""
        of = {q(name): typ for name, typ in columns}
        if all(key in of for key in keys):
            key_types = [of[key] for key in keys]
        else:
            key_types = [
                typ for _name, typ in self.typecheck(f"SELECT {', '.join(keys)} FROM ({sql}) AS t", refs)
            ]
        parts = [hashable(key, typ) for key, typ in zip(keys, key_types)]
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
        node = share_repeats(node, self.inputs)
        refs = leaves(node)
        sql = render(node)
        types = self.node_types(node, sql, refs)
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
            types = self.typecheck(sql, refs)
        run_sql, probes = _with_named_probes(node, sql)
        return Stage(
            len(self.stages) + 1,
            ranks,
            tuple(self.inputs[leaf.name] for leaf in refs),
            run_sql,
            Output("result", ranks, (0,)),
            types,
            "final result" + _one_rank_note(node) + repeats_note(node),
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
