"""The distributed planner: logical plan → stages separated by exchanges.

It walks the logical plan bottom-up, tracking how each intermediate result is
distributed over the ranks:

- ``random``: every rank holds a disjoint part (a partitioned scan);
- ``hash``: disjoint parts, rows with equal keys on the same rank;
- ``replicated``: every rank holds all of it (a broadcast or replicated scan);
- ``single``: rank 0 holds all of it.

and inserts an exchange (cutting a stage) only where an operator needs a
different distribution: joins are co-located, broadcast (small side by Parquet
statistics) or hash-partitioned on both sides; aggregates run partial →
exchange → final (or complete, when the input is already partitioned by a
subset of the group keys); ORDER BY … LIMIT runs a local top-k before the
gather; the result is gathered to rank 0. Each stage's SQL is type-checked by
DuckDB on empty inputs while planning, so a planner bug fails here, not on a
worker, and the result's types are cast to exactly what DuckDB would return.
"""

from __future__ import annotations

import base64
import dataclasses
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import pyarrow as pa
from sqlglot import exp

from squall.driver import logical as L
from squall.driver.catalog import Catalog, RowGroup
from squall.driver.estimate import prune_row_groups
from squall.driver.frontend import BoundQuery
from squall.driver.sqlgen import InputRef, q, render
from squall.driver.translate import Names, Planned, estimate_rows
from squall.errors import NotSupportedError
from squall.operators.duck import Sandbox
from squall.plan import ExchangeInput, Output, Plan, ScanInput, Split, Stage

_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
            "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL")  # fmt: skip


@dataclass(frozen=True)
class PlannerOptions:
    """Knobs of the distributed planner (all sizes in bytes)."""

    #: broadcast a join side when it is at most this big …
    broadcast_limit: float = 256e6
    #: … and its W copies cost less than shuffling the other side
    broadcast_factor: float = 1.0
    #: finish an aggregation on rank 0 when it has at most this many groups
    gather_groups: float = 200_000
    #: replicated scans (every rank reads a small table itself, no exchange) instead of a
    #: broadcast, when the tables read hold at most this many rows in all (before filters:
    #: every rank pays for the whole scan)
    replicated_scan_rows: float = 250_000


@dataclass(frozen=True)
class Dist:
    kind: str  # random | hash | replicated | single
    keys: tuple[frozenset[str], ...] = ()

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
        return Dist("hash", tuple(keys))


RANDOM = Dist("random")
SINGLE = Dist("single")
REPLICATED = Dist("replicated")

_DECOMPOSABLE = {"sum", "count", "count_star", "min", "max", "avg", "bool_and", "bool_or", "bit_and", "bit_or",
                 "bit_xor", "stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop",
                 "product", "fsum", "sumkahan", "kahan_sum"}  # fmt: skip
_SAME = {"min", "max", "bool_and", "bool_or", "bit_and", "bit_or", "bit_xor", "sum", "product", "fsum"}
_IDEMPOTENT = {"min", "max", "bool_and", "bool_or", "bit_and", "bit_or"}


class Planner:
    """Builds a :class:`Plan` for one bound query and a world size."""

    def __init__(
        self,
        catalog: Catalog,
        world_size: int,
        options: PlannerOptions | None = None,
        db: Sandbox | None = None,
    ) -> None:
        self.catalog = catalog
        self.world = world_size
        self.options = options or PlannerOptions()
        self.stages: list[Stage] = []
        self.schemas: dict[int, pa.Schema] = {}
        self.inputs: dict[str, ScanInput | ExchangeInput] = {}
        self.scan_schemas: dict[str, pa.Schema] = {}
        self.notes: list[str] = []
        self._names: Names | None = None
        self._counter = 0
        self._own_db = db is None
        self._db = db if db is not None else Sandbox(threads=1)

    # --- public -------------------------------------------------------------------------------

    def plan(self, bound: BoundQuery, planned: Planned, names: Names) -> Plan:
        self._names = names
        try:
            node, dist = self.build(planned.node)
            if dist.kind != "single" and self.world > 1:
                node = self._gather(node, dist, "result to rank 0")
            final = self._result_stage(node, bound)
        finally:
            if self._own_db:
                self._db.close()
        self.stages.append(final)
        self._fix_receivers()
        return Plan(
            sql=bound.sql,
            world_size=self.world,
            stages=tuple(self.stages),
            result_names=bound.names,
            result_types=bound.types,
            notes=tuple(self.notes),
        )

    def _fix_receivers(self) -> None:
        """Broadcasts go only to the ranks of the stage that consumes them."""
        consumer: dict[int, Stage] = {}
        for stage in self.stages:
            for inp in stage.inputs:
                if isinstance(inp, ExchangeInput):
                    consumer[inp.stage] = stage
        for i, stage in enumerate(self.stages):
            user = consumer.get(stage.id)
            if user is not None and stage.output.kind == "broadcast" and user.ranks != stage.output.receivers:
                output = dataclasses.replace(stage.output, receivers=user.ranks)
                self.stages[i] = dataclasses.replace(stage, output=output)

    # --- stages ---------------------------------------------------------------------------------

    def _fresh(self, base: str) -> str:
        assert self._names is not None
        return self._names.fresh(base)

    def _leaves(self, node: L.Node) -> list[InputRef]:
        if isinstance(node, InputRef):
            return [node]
        out: list[InputRef] = []
        for c in node.children:
            out.extend(self._leaves(c))
        return out

    def _typecheck(
        self, sql: str, leaves: Iterable[InputRef]
    ) -> tuple[pa.Schema, tuple[tuple[str, str], ...]]:
        registered = []
        try:
            for leaf in leaves:
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
                raise NotSupportedError(
                    f"planner produced SQL DuckDB rejects ({str(err).splitlines()[0]})"
                ) from None
        finally:
            for name in registered:
                self._db.con.unregister(name)
        return schema, types

    def _stage(self, node: L.Node, dist: Dist, output: Output, note: str = "") -> InputRef:
        """Cut ``node`` into a stage whose output goes to ``output``; return the consumer's input."""
        stage_id = len(self.stages) + 1
        leaves = self._leaves(node)
        sql = render(node)
        schema, types = self._typecheck(sql, leaves)
        ranks = (0,) if dist.kind == "single" or self.world == 1 else tuple(range(self.world))
        senders = (0,) if dist.kind in ("single", "replicated") else ranks
        receivers = (0,) if output.kind == "gather" else tuple(range(self.world))
        partition_sql = ""
        if output.kind == "hash":
            partition_sql = self._partition_sql(sql, output.keys, leaves)
        out = dataclasses.replace(output, senders=senders, receivers=receivers, partition_sql=partition_sql)
        stage = Stage(
            stage_id, ranks, tuple(self.inputs[leaf.name] for leaf in leaves), sql, out, types, note
        )
        self.stages.append(stage)
        self.schemas[stage_id] = schema
        name = f"x{stage_id}"
        self.inputs[name] = ExchangeInput(name, stage_id)
        return InputRef(name, node.names)

    def _partition_sql(self, sql: str, keys: tuple[str, ...], leaves: list[InputRef]) -> str:
        key_sql = ", ".join(keys)
        _schema, types = self._typecheck(f"SELECT {key_sql} FROM ({sql}) AS t", leaves)
        parts = []
        for key, (_name, typ) in zip(keys, types):
            numeric = typ.startswith(_NUMERIC)
            parts.append(f"CAST({key} AS DOUBLE)" if numeric else key)
        return f"hash({', '.join(parts)}) % {self.world}"

    def _gather(self, node: L.Node, dist: Dist, note: str) -> L.Node:
        return self._stage(node, dist, Output("gather"), note)

    def _result_stage(self, node: L.Node, bound: BoundQuery) -> Stage:
        leaves = self._leaves(node)
        sql = render(node)
        _schema, types = self._typecheck(sql, leaves)
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
            _schema, types = self._typecheck(sql, leaves)
        stage_id = len(self.stages) + 1
        ranks = (0,)
        return Stage(
            stage_id,
            ranks,
            tuple(self.inputs[leaf.name] for leaf in leaves),
            sql,
            Output("result", (0,), (0,)),
            types,
            "final result",
        )

    # --- scans ------------------------------------------------------------------------------------

    def _scan(self, node: L.Scan, replicated: bool) -> L.Node:
        info = self.catalog.table(node.table)
        source_of = {internal: source for source, internal in node.columns}
        groups = prune_row_groups(info, source_of, node.filters)
        sources = [source for source, _i in node.columns]
        file_groups = Counter(rg.path for rg in info.row_groups)
        if replicated or self.world == 1:
            splits = (_splits(groups, sources, file_groups),)
        else:
            splits = tuple(_splits(chunk, sources, file_groups) for chunk in _balance(groups, self.world))
        self._counter += 1
        name = f"s{self._counter}_{node.table.lower()}"
        fields = [info.schema.field(source).with_name(internal) for source, internal in node.columns]
        schema = pa.schema(fields)
        self.scan_schemas[name] = schema
        spec = ScanInput(
            name=name,
            table=info.name,
            location=info.location,
            columns=node.columns,
            splits=splits,
            replicated=replicated and self.world > 1,
            filters=tuple(L.sql_of(f) for f in node.filters),
            schema_b64=base64.b64encode(schema.serialize().to_pybytes()).decode(),
            scan=info.scan,
            scan_options=info.scan_options,
        )
        self.inputs[name] = spec
        out: L.Node = InputRef(name, node.names)
        if node.filters:
            out = L.Filter(
                out, exp.and_(*[f.copy() for f in node.filters]) if len(node.filters) > 1 else node.filters[0]
            )
        return out

    # --- the walk ---------------------------------------------------------------------------------

    def build(self, node: L.Node, replicate: bool = False) -> tuple[L.Node, Dist]:
        if isinstance(node, L.Scan):
            return self._scan(node, replicate), (REPLICATED if replicate and self.world > 1 else RANDOM)
        if isinstance(node, L.Values):
            return node, SINGLE
        if isinstance(node, L.Filter):
            child, dist = self.build(node.input, replicate)
            return L.Filter(child, node.predicate), dist
        if isinstance(node, L.Project):
            child, dist = self.build(node.input, replicate)
            mapping = {L.sql_of(e): q(n) for n, e in node.exprs}
            return L.Project(child, node.exprs), dist.rename(mapping)
        if isinstance(node, L.Join):
            return self._join(node, replicate)
        if isinstance(node, L.Aggregate):
            return self._aggregate(node)
        if isinstance(node, L.Sort):
            child, dist = self.build(node.input)
            if dist.kind not in ("single",) and self.world > 1:
                child, dist = self._gather(child, dist, "ORDER BY on rank 0"), SINGLE
            return L.Sort(child, node.keys), dist
        if isinstance(node, L.Limit):
            return self._limit(node)
        if isinstance(node, L.SetOp):
            return self._setop(node)
        if isinstance(node, L.Window):
            return self._window(node)
        raise NotSupportedError(f"{type(node).__name__} in a distributed plan")

    def _est_bytes(self, node: L.Node) -> float:
        return estimate_rows(node) * _width(node, self.catalog)

    def _to_hash(
        self, node: L.Node, dist: Dist, keys: tuple[exp.Expression, ...], note: str
    ) -> tuple[L.Node, Dist]:
        """Make ``node`` hash-partitioned on ``keys`` (no-op when it already is)."""
        texts = tuple(L.sql_of(k) for k in keys)
        if self.world == 1:
            return node, Dist("hash", tuple(frozenset([t]) for t in texts))
        if (
            dist.kind == "hash"
            and len(dist.keys) == len(texts)
            and all(t in eq for t, eq in zip(texts, dist.keys))
        ):
            return node, dist
        ref = self._stage(node, dist, Output("hash", keys=texts), note)
        return ref, Dist("hash", tuple(frozenset([t]) for t in texts))

    def _join(self, node: L.Join, replicate: bool) -> tuple[L.Node, Dist]:
        kind = node.kind
        if replicate:
            left, _ = self.build(node.left, True)
            right, _ = self.build(node.right, True)
            return dataclasses.replace(node, left=left, right=right), REPLICATED
        if self.world == 1:
            left, dl = self.build(node.left)
            right, dr = self.build(node.right)
            return dataclasses.replace(node, left=left, right=right), RANDOM
        # NOT IN needs the whole right side on every rank (its NULLs and emptiness are global)
        choice = "right" if node.null_aware else self._broadcast_choice(node)
        if choice in ("left", "right"):
            small, big = (node.right, node.left) if choice == "right" else (node.left, node.right)
            big_node, big_dist = self.build(big)
            small_node = self._broadcast(small)
            pair = (big_node, small_node) if choice == "right" else (small_node, big_node)
            return dataclasses.replace(node, left=pair[0], right=pair[1]), big_dist
        left, dl = self.build(node.left)
        right, dr = self.build(node.right)
        if (
            kind in ("semi", "anti")
            and node.residual is None
            and not node.null_aware
            and all(isinstance(k, exp.Column) for k in node.right_keys)
        ):
            # only the right side's distinct keys matter: dedupe them locally before they move
            right = L.Aggregate(right, tuple((k.name, k) for k in node.right_keys), ())
        if choice == "gather":
            if dl.kind != "single":
                left = self._gather(left, dl, f"{kind} join without equality keys on rank 0")
            if dr.kind != "single":
                right = self._gather(right, dr, f"{kind} join without equality keys on rank 0")
            return dataclasses.replace(node, left=left, right=right), SINGLE
        if dl.kind == "single" and dr.kind == "single":
            return dataclasses.replace(node, left=left, right=right), SINGLE
        lkeys, rkeys = node.left_keys, node.right_keys
        # co-location: one side already partitioned on a subset of the join keys
        colocated = self._colocated(dl, lkeys, rkeys) or self._colocated(dr, rkeys, lkeys)
        if colocated is not None:
            own, other = colocated
            if self._colocated(dl, lkeys, rkeys) is not None:
                right, dr = self._to_hash(right, dr, other, f"{kind} join: co-partition with the left side")
                left_keys, right_keys = own, other
            else:
                left, dl = self._to_hash(left, dl, other, f"{kind} join: co-partition with the right side")
                left_keys, right_keys = other, own
        else:
            left, dl = self._to_hash(left, dl, lkeys, f"{kind} join: partition left side by key")
            right, dr = self._to_hash(right, dr, rkeys, f"{kind} join: partition right side by key")
            left_keys, right_keys = lkeys, rkeys
        keys = tuple(
            frozenset([L.sql_of(a), L.sql_of(b)]) if kind == "inner" else frozenset([L.sql_of(a)])
            for a, b in zip(left_keys, right_keys)
        )
        if kind in ("right",):
            keys = tuple(frozenset([L.sql_of(b)]) for b in right_keys)
        if kind == "full":
            dist = RANDOM
        else:
            dist = Dist("hash", keys)
        return dataclasses.replace(node, left=left, right=right), dist

    def _broadcast_choice(self, node: L.Join) -> str | None:
        """ "left"/"right" to broadcast that side, "gather" for a keyless join, None to shuffle."""
        lbytes, rbytes = self._est_bytes(node.left), self._est_bytes(node.right)
        candidates = []
        if node.kind in ("inner", "left", "semi", "anti", "cross"):
            candidates.append(("right", rbytes, lbytes))
        if node.kind in ("inner", "right", "cross"):
            candidates.append(("left", lbytes, rbytes))
        if candidates:
            side, small, big = min(candidates, key=lambda c: c[1])
            if small <= self.options.broadcast_limit and (
                not node.left_keys or small * self.world <= big * self.options.broadcast_factor
            ):
                return side
        return None if node.left_keys else "gather"

    def _colocated(self, dist: Dist, own: tuple[exp.Expression, ...], other: tuple[exp.Expression, ...]):
        """If ``dist`` is hash on a subset of ``own`` keys: (own keys, matching other keys) in dist order."""
        if dist.kind != "hash" or not own:
            return None
        own_texts = [L.sql_of(k) for k in own]
        chosen_own, chosen_other = [], []
        for eq in dist.keys:
            idx = next((i for i, t in enumerate(own_texts) if t in eq), None)
            if idx is None:
                return None
            chosen_own.append(own[idx])
            chosen_other.append(other[idx])
        return tuple(chosen_own), tuple(chosen_other)

    def _pure(self, node: L.Node) -> bool:
        if isinstance(node, L.Scan):
            return True
        if isinstance(node, (L.Filter, L.Project)):
            return self._pure(node.input)
        if isinstance(node, L.Join) and node.kind in ("inner", "cross"):
            return self._pure(node.left) and self._pure(node.right)
        return False

    def _scan_rows(self, node: L.Node) -> float:
        if isinstance(node, L.Scan):
            return float(self.catalog.table(node.table).num_rows)
        return sum(self._scan_rows(c) for c in node.children)

    def _broadcast(self, small: L.Node) -> L.Node:
        if self._pure(small) and self._scan_rows(small) <= self.options.replicated_scan_rows:
            node, _ = self.build(small, replicate=True)
            return node
        node, dist = self.build(small)
        if dist.kind == "replicated":
            return node
        return self._stage(node, dist, Output("broadcast"), "broadcast the small join side")

    # --- aggregation ------------------------------------------------------------------------------

    def _aggregate(self, node: L.Aggregate) -> tuple[L.Node, Dist]:
        child, dist = self.build(node.input)
        key_texts = [L.sql_of(e) for _n, e in node.keys]
        out_dist_keys = tuple(frozenset([q(n)]) for n, _e in node.keys)
        if self.world == 1 or dist.kind in ("single", "replicated"):
            return L.Aggregate(child, node.keys, node.aggs), (dist if dist.kind != "random" else RANDOM)
        if dist.kind == "hash" and node.keys and all(any(t in eq for t in key_texts) for eq in dist.keys):
            mapping = {t: q(n) for t, (n, _e) in zip(key_texts, node.keys)}
            return L.Aggregate(child, node.keys, node.aggs), dist.rename(mapping)
        groups = self._est_groups(node)
        gather = not node.keys or groups <= self.options.gather_groups
        decomposable = all(a.func in _DECOMPOSABLE and not a.distinct for _n, a in node.aggs)
        if decomposable:
            partial, final, post = self._split_aggs(node)
            part_node = L.Aggregate(child, node.keys, partial)
            key_cols = tuple((n, L.col(n)) for n, _e in node.keys)
            if gather:
                ref = self._gather(part_node, dist, "partial aggregates to rank 0")
                out_dist = SINGLE
            else:
                ref = self._stage(part_node, dist, Output("hash", keys=tuple(q(n) for n, _ in node.keys)),
                                  "partial aggregates by group key")  # fmt: skip
                out_dist = Dist("hash", out_dist_keys)
            final_node: L.Node = L.Aggregate(ref, key_cols, final)
            final_node = L.Project(final_node, tuple((n, L.col(n)) for n, _ in node.keys) + post)
            return final_node, out_dist
        # not decomposable (DISTINCT, holistic aggregates): move rows, then aggregate completely
        pre: L.Node = child
        if all(a.distinct or a.func in _IDEMPOTENT for _n, a in node.aggs) and node.aggs:
            cols: dict[str, exp.Expression] = {n: e for n, e in node.keys}
            for _n, a in node.aggs:
                for arg in a.args:
                    cols.setdefault(self._fresh("arg"), arg)
            # dedupe locally on (keys, arguments) first: shrinks what moves
            names = {L.sql_of(e): n for n, e in cols.items()}
            pre = L.Aggregate(child, tuple((n, e) for n, e in cols.items()), ())
            keys = tuple((n, L.col(n)) for n, _e in node.keys)
            aggs = tuple(
                (n, dataclasses.replace(a, expression=_rewrite_cols(a.expression, names)))
                for n, a in node.aggs
            )
            node = L.Aggregate(node.input, keys, aggs)
        if not node.keys:
            ref = self._gather(pre, dist, "aggregate that cannot be split: rows to rank 0")
            return L.Aggregate(ref, node.keys, node.aggs), SINGLE
        key_exprs = tuple(e for _n, e in node.keys)
        if isinstance(pre, L.Aggregate):
            key_exprs = tuple(L.col(n) for n, _e in node.keys)
        ref, _ = self._to_hash(pre, dist, key_exprs, "aggregate that cannot be split: rows by group key")
        return L.Aggregate(ref, node.keys, node.aggs), Dist("hash", out_dist_keys)

    def _est_groups(self, node: L.Aggregate) -> float:
        rows = estimate_rows(node.input)
        groups = 1.0
        for _n, e in node.keys:
            groups *= self._ndv(node.input, e, rows)
        return min(groups, rows)

    def _ndv(self, below: L.Node, e: exp.Expression, rows: float) -> float:
        if isinstance(e, exp.Column):
            found = _find_scan_column(below, e.name)
            if found is not None:
                scan, source = found
                return float(self.catalog.ndv(scan.table, source))
        return max(rows**0.5, 1.0)

    def _split_aggs(self, node: L.Aggregate):
        partial: list[tuple[str, L.AggCall]] = []
        final: list[tuple[str, L.AggCall]] = []
        post: list[tuple[str, exp.Expression]] = []

        seen: dict[str, str] = {}

        def add_partial(func: str, args: tuple[exp.Expression, ...], text: str) -> str:
            key = L.sql_of(_parse(text))
            if key not in seen:
                seen[key] = self._fresh("p_" + func)
                partial.append((seen[key], L.AggCall(func, args, False, _parse(text))))
            return seen[key]

        def add_final(func: str, text: str) -> str:
            key = L.sql_of(_parse(text))
            if key not in seen:
                seen[key] = self._fresh("f_" + func)
                final.append((seen[key], L.AggCall(func, (), False, _parse(text))))
            return seen[key]

        for name, a in node.aggs:
            f = a.func
            arg = L.sql_of(a.args[0]) if a.args else ""
            if f == "count_star":
                p = add_partial("count", (), "COUNT(*)")
                post.append(
                    (name, _parse(f"CAST(COALESCE({q(add_final('sum', f'SUM({q(p)})'))}, 0) AS BIGINT)"))
                )
            elif f == "count":
                p = add_partial("count", a.args, L.sql_of(a.expression))
                post.append(
                    (name, _parse(f"CAST(COALESCE({q(add_final('sum', f'SUM({q(p)})'))}, 0) AS BIGINT)"))
                )
            elif f in _SAME:
                p = add_partial(f, a.args, L.sql_of(a.expression))
                fin = add_final(f, f"{f.upper()}({q(p)})")
                post.append((name, L.col(fin)))
            elif f == "avg":
                s = add_partial("sum", a.args, f"SUM({arg})")
                c = add_partial("count", a.args, f"COUNT({arg})")
                fs, fc = add_final("sum", f"SUM({q(s)})"), add_final("sum", f"SUM({q(c)})")
                post.append((name, _parse(f"CAST({q(fs)} AS DOUBLE) / CAST({q(fc)} AS DOUBLE)")))
            elif f in ("stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop"):
                x = f"CAST({arg} AS DOUBLE)"
                n = add_partial("count", a.args, f"COUNT({arg})")
                s = add_partial("sum", a.args, f"SUM({x})")
                ss = add_partial("sum", a.args, f"SUM({x} * {x})")
                fn, fs, fss = (add_final("sum", f"SUM({q(p)})") for p in (n, s, ss))
                m2 = f"GREATEST({q(fss)} - {q(fs)} * {q(fs)} / {q(fn)}, 0)"
                pop = f in ("stddev_pop", "var_pop")
                denom = q(fn) if pop else f"({q(fn)} - 1)"
                guard = f"{q(fn)} > 0" if pop else f"{q(fn)} > 1"
                var = f"CASE WHEN {guard} THEN {m2} / {denom} END"
                post.append((name, _parse(f"SQRT({var})" if f.startswith("stddev") else var)))
            else:
                raise NotSupportedError(f"aggregate {f} split")
        return tuple(partial), tuple(final), tuple(post)

    # --- sort / limit / set operations / windows ----------------------------------------------------

    def _limit(self, node: L.Limit) -> tuple[L.Node, Dist]:
        inner = node.input
        if isinstance(inner, L.Sort):
            child, dist = self.build(inner.input)
            if dist.kind != "single" and self.world > 1:
                if node.limit is not None:
                    local = L.Limit(L.Sort(child, inner.keys), node.limit + node.offset, 0)
                    child = self._gather(local, dist, "local top-k, merged on rank 0")
                else:
                    child = self._gather(child, dist, "ORDER BY on rank 0")
                dist = SINGLE
            return L.Limit(L.Sort(child, inner.keys), node.limit, node.offset), dist
        child, dist = self.build(inner)
        if dist.kind != "single" and self.world > 1:
            if node.limit is not None:
                child = L.Limit(child, node.limit + node.offset, 0)
            child = self._gather(child, dist, "LIMIT on rank 0")
            dist = SINGLE
        return L.Limit(child, node.limit, node.offset), dist

    def _setop(self, node: L.SetOp) -> tuple[L.Node, Dist]:
        built = [self.build(c) for c in node.inputs]
        if self.world == 1:
            return dataclasses.replace(node, inputs=tuple(b[0] for b in built)), RANDOM
        if any(d.kind == "single" for _n, d in built):
            children = tuple(
                n if d.kind == "single" else self._gather(n, d, "set operation on rank 0") for n, d in built
            )
            return dataclasses.replace(node, inputs=children), SINGLE
        if node.kind == "union" and node.all:
            return dataclasses.replace(node, inputs=tuple(n for n, _d in built)), RANDOM
        children = []
        for (child, dist), logical in zip(built, node.inputs):
            keys = tuple(L.col(n) for n in logical.names)
            ref, _ = self._to_hash(child, dist, keys, f"{node.kind.upper()}: rows by value")
            children.append(ref)
        return dataclasses.replace(node, inputs=tuple(children)), Dist(
            "hash", tuple(frozenset([q(n)]) for n in node.out)
        )

    def _window(self, node: L.Window) -> tuple[L.Node, Dist]:
        child, dist = self.build(node.input)
        if self.world == 1:
            return L.Window(child, node.exprs, node.partition_by), dist
        if node.partition_by:
            child, dist = self._to_hash(child, dist, node.partition_by, "window: rows by PARTITION BY")
            return L.Window(child, node.exprs, node.partition_by), dist
        if dist.kind != "single":
            child = self._gather(child, dist, "window without PARTITION BY on rank 0")
        return L.Window(child, node.exprs, node.partition_by), SINGLE


# --- helpers -----------------------------------------------------------------------------------------


def _parse(text: str) -> exp.Expression:
    import sqlglot

    return sqlglot.parse_one(text, read="duckdb")


def _rewrite_cols(e: exp.Expression, names: dict[str, str]) -> exp.Expression:
    def fix(n: exp.Expression) -> exp.Expression:
        text = L.sql_of(n)
        if text in names and not isinstance(n, (exp.AggFunc, exp.Distinct)):
            return L.col(names[text])
        return n

    return e.copy().transform(fix)


def _find_scan_column(node: L.Node, name: str) -> tuple[L.Scan, str] | None:
    if isinstance(node, L.Scan):
        for source, internal in node.columns:
            if internal == name:
                return node, source
        return None
    for c in node.children:
        found = _find_scan_column(c, name)
        if found is not None:
            return found
    return None


def _width(node: L.Node, catalog: Catalog) -> float:
    if isinstance(node, L.Scan):
        info = catalog.table(node.table)
        return max(info.row_width([s for s, _i in node.columns]), 1.0)
    if isinstance(node, L.Join):
        if node.kind in ("semi", "anti"):
            return _width(node.left, catalog)
        return _width(node.left, catalog) + _width(node.right, catalog)
    if isinstance(node, (L.Filter, L.Sort, L.Limit)):
        return _width(node.input, catalog)
    return 8.0 * max(len(node.names), 1)


def _splits(groups: Iterable[RowGroup], columns: list[str], file_groups: Counter[str]) -> tuple[Split, ...]:
    """Group row groups by file; contiguous row groups merge into one row range.

    ``file_groups`` counts every file's row groups, so a split holding all of them is marked whole.
    """
    out: list[Split] = []
    for rg in groups:
        rng = (rg.first_row, rg.first_row + rg.num_rows)
        nbytes = sum(rg.columns[c].compressed_bytes for c in columns if c in rg.columns)
        if out and out[-1].path == rg.path:
            prev = out[-1]
            ranges = list(prev.row_ranges)
            if ranges[-1][1] == rng[0]:
                ranges[-1] = (ranges[-1][0], rng[1])
            else:
                ranges.append(rng)
            out[-1] = Split(
                rg.path,
                (*prev.row_groups, rg.index),
                tuple(ranges),
                prev.rows + rg.num_rows,
                prev.nbytes + nbytes,
            )
        else:
            out.append(Split(rg.path, (rg.index,), (rng,), rg.num_rows, nbytes))
    return tuple(
        dataclasses.replace(sp, whole_file=True) if len(sp.row_groups) == file_groups[sp.path] else sp
        for sp in out
    )


def _balance(groups: list[RowGroup], world: int) -> list[list[RowGroup]]:
    """Contiguous chunks of row groups with about equal row counts, one per rank."""
    total = sum(g.num_rows for g in groups)
    chunks: list[list[RowGroup]] = [[] for _ in range(world)]
    if not groups:
        return chunks
    if len(groups) <= world:
        for i, g in enumerate(groups):
            chunks[i].append(g)
        return chunks
    target = total / world
    acc = 0
    for g in groups:
        rank = min(int(math.floor((acc + g.num_rows / 2) / target)) if target else 0, world - 1)
        chunks[rank].append(g)
        acc += g.num_rows
    return chunks
