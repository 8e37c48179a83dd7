"""JCC-H-style skewed TPC-H: tpchgen-cli's uniform tables with heavy-hitter and Zipf foreign keys.

After Boncz, Anadiotis, Kläbe, *JCC-H: adding Join Crossing Correlations with Skew to TPC-H* (TPCTC 2017):
the schema, types and row counts stay TPC-H's, so the 22 queries run unchanged, but the foreign keys of
``orders`` and ``lineitem`` are redrawn so that a few keys are heavy hitters, the rest follow a Zipf law if
asked, and the skew crosses joins (hot orders belong to hot customers and hold hot parts). Not JCC-H's own
dbgen patch: its shares and parameters differ; the table below is exactly what this module does.

Options (:class:`SkewSpec`): ``hot_share`` *h* (0 ≤ h < 1), ``hot_keys`` *K* (≥ 1), ``zipf`` *z* (0: off,
else > 0), ``seed``, ``correlate_dates``, and for the order keys alone ``hot_orders`` *K_o* (default *K*) and
``order_zipf`` *z_o* (default *z*). Every random choice is a hash of the row's primary key, the seed
and a tag (DuckDB's ``hash``, no ``random()``): the same options and DuckDB version give identical files.

=====================================  ==========================================================================
column                                 value after rewriting
=====================================  ==========================================================================
``lineitem.l_orderkey``                with probability *h* (one draw per row: the *hot row* draw) one of the *K_o*
                                       hot orders, uniformly; else Zipf(*z_o*) over all orders when *z_o* > 0;
                                       else unchanged. A single hot order (K_o = 1) holds a share *h* of all
                                       lineitems.
``lineitem.l_partkey``                 hot rows: one of the *K* hot parts (the same draw as the hot order: a hot
                                       order's lines are hot parts,
                                       but for its own ≤ 7 original lines); else Zipf(*z*) over all parts when *z* > 0;
                                       else unchanged.
``lineitem.l_suppkey``                 unchanged unless ``l_partkey`` changed; then one of that part's 4
                                       ``partsupp`` suppliers (uniformly), so (l_partkey, l_suppkey) is always a
                                       ``partsupp`` pair; the hot part's 4 suppliers share its *h* of lineitems.
``lineitem.l_linenumber``              renumbered 1..n within each (new) order, in the original row order, so
                                       (l_orderkey, l_linenumber) stays a key.
``orders.o_custkey``                   the *K_o* hot orders: hot customer ``i mod K`` (hot order *i*); other orders
                                       with probability *h* one of the *K* hot customers, else Zipf(*z*) over all
                                       customers when *z* > 0, else unchanged.
``orders.o_orderkey`` (dates)          ``--correlate-dates`` only: the same key set, reassigned in order of
                                       ``o_orderdate`` + a jitter of ±30 days (hash of the key), and
                                       ``lineitem.l_orderkey`` mapped alike; both tables written in key order
                                       (lineitem in the order of its original order's new key), so that every
                                       file and row group holds a date range of both tables (fuzzy co-location).
other tables and columns               unchanged (region, nation, supplier, customer, part, partsupp).
=====================================  ==========================================================================

Hot and Zipf keys use one ranking per domain: the keys sorted by a hash of (key, seed). The hot keys are ranks
1..K and Zipf rank *r* (probability ∝ r^-z over the domain's n keys, drawn exactly by inverse CDF) is the key of
rank *r*, so the Zipf head and the hot keys coincide. Zipf(1.5) puts ≈38 % of the draws on rank 1 at any
size (ζ(1.5) ≈ 2.61), Zipf(1.0) 1/H_n (≈7 % for SF1's 1.5 M orders, ≈10 % for 15,000 orders at SF 0.01).

Consequences to expect: o_totalprice and o_orderstatus no longer agree with the (moved) lineitems, and a hot
order's lines keep their own dates; queries stay valid SQL over consistent keys. A self-join on
``l_orderkey`` (Q21's EXISTS) costs K_o·(h·|lineitem|/K_o)² pairs on the hot orders, and Zipf(z_o) orders
|lineitem|²·ζ(2·z_o)/H(z_o)²: at SF1 spread the hot rows over many orders (``hot_orders``) and keep z_o ≤ 0.5,
while parts and customers keep a few heavy hitters (the test suite's settings, tests/jcch_data.py).

Output: like ``squall gen-tpch`` (``out/<table>.parquet`` or, with ``parts``, ``out/<table>/<table>.<i>.parquet``
with the same per-part row counts), each part with the uniform part's number of row groups; plus
``out/jcch.json`` naming the options (written last: a folder without it is incomplete).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from squall.errors import OptionError
from squall.tpch import (
    _check_output,
    _check_parts,
    _check_sf,
    dataset_files,
    generate,
    replace_tables,
)

__all__ = ["MARKER", "SkewSpec", "generate_skewed", "read_marker"]

MARKER = "jcch.json"
"""File in a skewed dataset's folder naming the generator options (written last)."""

DATE_JITTER_DAYS = 30
"""``correlate_dates``: orders are ranked by o_orderdate plus a hash jitter of at most this many days either way."""

_REWRITTEN = ("orders", "lineitem")


@dataclass(frozen=True)
class SkewSpec:
    """The skew options (see the module docstring for what each does)."""

    hot_share: float = 0.3
    hot_keys: int = 1
    zipf: float = 0.0
    seed: int = 0
    correlate_dates: bool = False
    hot_orders: int | None = None
    """Hot orders (None: ``hot_keys``): the hot rows spread over this many orders, parts and customers stay K."""
    order_zipf: float | None = None
    """Zipf exponent of the other lineitems' order keys (None: ``zipf``; 0: unchanged)."""

    def __post_init__(self) -> None:
        h, k, z, s = self.hot_share, self.hot_keys, self.zipf, self.seed
        if isinstance(h, bool) or not isinstance(h, int | float) or not (0 <= h < 1):
            raise OptionError(f"--hot-share must be a number in [0, 1), got {h!r}")
        # hot_keys and zipf are required; hot_orders and order_zipf may be None (= hot_keys, zipf)
        for flag, count, optional in (("--hot-keys", k, False), ("--hot-orders", self.hot_orders, True)):
            if not (optional and count is None) and (
                isinstance(count, bool) or not isinstance(count, int) or count < 1
            ):
                raise OptionError(f"{flag} must be a positive integer, got {count!r}")
        for flag, exponent, optional in (("--zipf", z, False), ("--order-zipf", self.order_zipf, True)):
            if not (optional and exponent is None) and (
                isinstance(exponent, bool)
                or not isinstance(exponent, int | float)
                or not math.isfinite(exponent)
                or not 0 <= exponent <= 10
            ):
                raise OptionError(f"{flag} must be 0 (off) or an exponent in (0, 10], got {exponent!r}")
        if isinstance(s, bool) or not isinstance(s, int) or not (0 <= s < 2**31):
            raise OptionError(f"--seed must be an integer in [0, 2^31), got {s!r}")
        if not isinstance(self.correlate_dates, bool):
            raise OptionError(f"correlate_dates must be a bool, got {self.correlate_dates!r}")

    @property
    def orders_hot(self) -> int:
        """How many orders the hot rows fall on."""
        return self.hot_keys if self.hot_orders is None else self.hot_orders

    @property
    def orders_zipf(self) -> float:
        """The Zipf exponent of the other lineitems' order keys (0: unchanged)."""
        return float(self.zipf if self.order_zipf is None else self.order_zipf)

    def label(self) -> str:
        """A short name, e.g. ``hot0.3k1-s0``, ``hot0.3k1o1000-s0`` or ``zipf1.5-s0-dates``."""
        parts = []
        if self.hot_share:
            orders = f"o{self.hot_orders}" if self.hot_orders is not None else ""
            parts.append(f"hot{self.hot_share:g}k{self.hot_keys}{orders}")
        if self.zipf:
            parts.append(f"zipf{self.zipf:g}")
        if self.order_zipf is not None:
            parts.append(f"ozipf{self.order_zipf:g}")
        name = "-".join(parts) or "uniform"
        return f"{name}-s{self.seed}" + ("-dates" if self.correlate_dates else "")


def read_marker(out: str | Path) -> dict[str, object] | None:
    """The options a complete skewed dataset in ``out`` was written with (``{"sf": …, "spec": {…}}``), or None."""
    path = Path(out) / MARKER
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def generate_skewed(
    sf: float,
    out: str | Path,
    spec: SkewSpec,
    parts: int | None = None,
    *,
    force: bool = False,
    source: str | Path | None = None,
) -> list[Path]:
    """Write JCC-H-style skewed TPC-H at scale factor ``sf`` into ``out``; return the files.

    ``source`` is a uniform TPC-H folder of the same scale factor and layout to start from (tests use the
    cache); without it tpchgen-cli writes one into a temporary folder beside ``out``. The result is staged
    beside ``out`` and moved into place table by table (lineitem, then the marker, last). A folder holding
    TPC-H of another scale factor is refused unless ``force``. Bad options raise ``OptionError``.
    """
    sf = _check_sf(sf)
    if not isinstance(spec, SkewSpec):
        raise OptionError(f"spec must be a SkewSpec, got {type(spec).__name__}")
    _check_parts(parts)
    out = _check_output(out, sf, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        if source is None:
            source = tmp / "uniform"
            generate(sf, source, parts)
        src = dataset_files(source)
        staged = tmp / "data"
        staged.mkdir()
        _rewrite(src, staged, spec, parts is not None, tmp / "duck")
        out.mkdir(exist_ok=True)
        (out / MARKER).unlink(missing_ok=True)
        replace_tables(staged, out, parts is not None, tmp / "old")
        os.chmod(out, 0o755)
        (out / MARKER).write_text(
            json.dumps({"sf": sf, "parts": parts, "spec": asdict(spec)}, indent=1) + "\n"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [path for files in dataset_files(out).values() for path in files]


# --- the rewrite ------------------------------------------------------------------------------------------


def _u(key: str, seed: int, tag: str) -> str:
    """SQL: a uniform double in [0, 1) from a hash of (key, seed, tag)."""
    return f"((hash({key}, {seed}, '{tag}') >> 11)::DOUBLE / 9007199254740992.0)"


def _h(key: str, seed: int, tag: str) -> str:
    return f"hash({key}, {seed}, '{tag}')"


def _zipf_cdf(n: int, z: float) -> pa.Table:
    """Rank r = 1..n with lo = P(rank < r) under Zipf(z) (a draw u picks the largest lo ≤ u)."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -z
    cum = np.cumsum(weights)
    cum /= cum[-1]
    lo = np.concatenate(([0.0], cum[:-1]))
    return pa.table({"lo": lo, "rnk": np.arange(1, n + 1, dtype=np.int64)})


def _view(con: duckdb.DuckDBPyConnection, table: str, files: list[Path]) -> None:
    paths = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    con.execute(f"create view {table} as select * from read_parquet([{paths}])")


def _rewrite(src: dict[str, list[Path]], staged: Path, spec: SkewSpec, split: bool, duck_tmp: Path) -> None:
    con = duckdb.connect(
        config={
            "memory_limit": os.environ.get("SQUALL_JCCH_MEMORY", "2GB"),
            "temp_directory": str(duck_tmp),
            "preserve_insertion_order": True,
        }
    )
    con.execute("set enable_progress_bar = false")
    try:
        for table, files in src.items():
            _view(con, table, files)
        _plan_keys(con, spec)
        queries = {"orders": _orders_sql(spec), "lineitem": _lineitem_sql(spec)}
        for table, files in src.items():
            target = staged / table if split else staged
            target.mkdir(exist_ok=True)
            if table not in queries:
                for f in files:
                    shutil.copyfile(f, target / f.name)
                continue
            _write_like(con.sql(queries[table]).arrow(), files, target)
    finally:
        con.close()


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    rows = con.execute(f"select count(*) from {table}").fetchall()
    return int(rows[0][0])


def _plan_keys(con: duckdb.DuckDBPyConnection, spec: SkewSpec) -> None:
    """Temp tables: each domain's hash ranking, Zipf CDFs, and the new keys of every orders/lineitem row."""
    s, h, k, z, zo = spec.seed, float(spec.hot_share), spec.hot_keys, float(spec.zipf), spec.orders_zipf
    for dom, table, key, exponent in (("cust", "customer", "c_custkey", z), ("ord", "orders", "o_orderkey", zo),
                                      ("part", "part", "p_partkey", z)):  # fmt: skip
        con.execute(
            f"create temp table {dom}_dom as select {key} as key, "
            f"row_number() over (order by {_h(key, s, dom)}, {key}) - 1 as idx from {table}"
        )
        if exponent > 0:
            n = _count(con, f"{dom}_dom")
            con.register("zipf_cdf_input", _zipf_cdf(n, exponent))
            con.execute(f"create temp table {dom}_cdf as select * from zipf_cdf_input")
            con.unregister("zipf_cdf_input")
    con.execute(
        "create temp table ps_idx as select ps_partkey, ps_suppkey, "
        "row_number() over (partition by ps_partkey order by ps_suppkey) - 1 as j, "
        "count(*) over (partition by ps_partkey) as m from partsupp"
    )
    n_cust = _count(con, "cust_dom")
    n_part = _count(con, "part_dom")
    n_ord = _count(con, "ord_dom")
    kc, kp, ko = min(k, n_cust), min(k, n_part), min(spec.orders_hot, n_ord)

    def zipf_join(alias: str, dom: str, draw: str, exponent: float) -> str:
        return f" asof left join {dom}_cdf {alias} on {draw} >= {alias}.lo" if exponent > 0 else ""

    def zipf_idx(alias: str, exponent: float) -> str:
        return f"{alias}.rnk - 1" if exponent > 0 else "null"

    # orders: the new customer index (null: unchanged)
    hot_order = f"d.idx < {ko}" if h > 0 else "false"
    con.execute(
        f"""create temp table o_new as
        with b as (
            select o_orderkey as pk, o_orderdate as odate, d.idx as oidx, {hot_order} as hot_order,
                   {_u("o_orderkey", s, "o_hot")} as uh, {_u("o_orderkey", s, "o_zipf")} as uz,
                   {_h("o_orderkey", s, "o_pick")} as pick
            from orders join ord_dom d on d.key = o_orderkey)
        select pk, odate,
               case when hot_order then oidx % {kc}
                    when uh < {h} then pick % {kc}
                    else {zipf_idx("zc", z)} end as cidx
        from b{zipf_join("zc", "cust", "b.uz", z)}"""
    )
    # lineitem: new order and part indexes (null: unchanged), the supplier pick
    con.execute(
        f"""create temp table l_pick as
        with b as (
            select l_orderkey as ok, l_linenumber as ln, l_partkey as opk, l_suppkey as osk,
                   {_u("l_orderkey, l_linenumber", s, "l_hot")} as uh,
                   {_u("l_orderkey, l_linenumber", s, "l_ozipf")} as uo,
                   {_u("l_orderkey, l_linenumber", s, "l_pzipf")} as up,
                   {_h("l_orderkey, l_linenumber", s, "l_pick")} as pick,
                   {_h("l_orderkey, l_linenumber", s, "l_supp")} as spick
            from lineitem)
        select ok, ln, opk, osk, spick,
               case when uh < {h} then pick % {ko} else {zipf_idx("zo", zo)} end as oidx,
               case when uh < {h} then pick % {kp} else {zipf_idx("zp", z)} end as pidx
        from b{zipf_join("zo", "ord", "b.uo", zo)}{zipf_join("zp", "part", "b.up", z)}"""
    )
    con.execute(
        """create temp table l_new as
        with r as (
            select p.ok, p.ln, coalesce(od.key, p.ok) as nok,
                   coalesce(pd.key, p.opk) as npk, case when pd.key is null then p.osk end as keep_sk, p.spick
            from l_pick p left join ord_dom od on od.idx = p.oidx left join part_dom pd on pd.idx = p.pidx)
        select r.ok, r.ln, r.nok, r.npk, coalesce(r.keep_sk, ps.ps_suppkey) as nsk,
               row_number() over (partition by r.nok order by r.ok, r.ln)::INTEGER as nln
        from r left join ps_idx ps on r.keep_sk is null and ps.ps_partkey = r.npk and ps.j = r.spick % ps.m"""
    )
    if spec.correlate_dates:
        jitter = f"(({_h('pk', s, 'o_date')}) % {2 * DATE_JITTER_DAYS + 1})::INTEGER - {DATE_JITTER_DAYS}"
        con.execute(
            f"""create temp table o_map as
            with ranked as (select pk, row_number() over (order by odate + {jitter}, pk) as r from o_new),
                 keys as (select pk as key, row_number() over (order by pk) as r from o_new)
            select ranked.pk as old, keys.key as new from ranked join keys using (r)"""
        )
    else:
        con.execute("create temp table o_map as select pk as old, pk as new from o_new")


def _orders_sql(spec: SkewSpec) -> str:
    return """select o.* replace (m.new as o_orderkey, coalesce(c.key, o.o_custkey) as o_custkey)
        from orders o join o_new n on n.pk = o.o_orderkey join o_map m on m.old = o.o_orderkey
        left join cust_dom c on c.idx = n.cidx
        order by m.new"""


def _lineitem_sql(spec: SkewSpec) -> str:
    return """select l.* replace (m.new as l_orderkey, n.npk as l_partkey, n.nsk as l_suppkey, n.nln as l_linenumber)
        from lineitem l join l_new n on n.ok = l.l_orderkey and n.ln = l.l_linenumber
        join o_map m on m.old = n.nok join o_map placed on placed.old = l.l_orderkey
        order by placed.new, l.l_linenumber"""


def _write_like(reader: pa.RecordBatchReader, files: list[Path], target: Path) -> None:
    """Write the rows of ``reader`` as files named like ``files``, with their row counts, schema and number of
    row groups (each part's rows split evenly into that many groups)."""
    batches = iter(reader)
    pending: list[pa.RecordBatch] = []
    have = 0
    for f in files:
        meta = pq.ParquetFile(f)
        schema = meta.schema_arrow
        rows = meta.metadata.num_rows
        group = max(1, math.ceil(rows / max(1, meta.metadata.num_row_groups)))
        with pq.ParquetWriter(target / f.name, schema) as writer:
            written = 0
            while written < rows:
                while have < min(group, rows - written):
                    batch = next(batches)
                    pending.append(batch)
                    have += batch.num_rows
                take = min(group, rows - written)
                chunk = pa.Table.from_batches(pending).combine_chunks()
                writer.write_table(chunk.slice(0, take).cast(schema), row_group_size=take)
                rest = chunk.slice(take)
                pending, have = rest.to_batches(), rest.num_rows
                written += take
            if rows == 0:
                writer.write_table(schema.empty_table())
    if have or next(batches, None) is not None:
        raise AssertionError("skewed table has more rows than the uniform one")
