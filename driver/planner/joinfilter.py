"""The SQL of join filters (semi-join pushdown): build a partial filter, apply the merged one.

A join filter summarises the build side's keys so the probe side can drop rows
at its scan, before they are partitioned and sent. Two kinds, both plain DuckDB
SQL so they run on every platform and cross the ordinary exchange:

- ``keys``: the exact distinct keys (NULLs left out); the probe side keeps rows
  by a semi join on them. Used when the build side is estimated tiny.
- ``local``: like ``keys``, but the build side is a replicated scan that every rank reads whole
  anyway, so each rank computes the exact keys itself inside the probe's stage: no filter
  stage, no extra round, no bytes.
- ``bloom``: a Bloom filter of ``bits`` bits (a power of two) and :data:`HASHES`
  hash functions by double hashing over DuckDB's 64-bit ``hash()`` of the key
  columns (numbers cast to DOUBLE, as the hash partitioning does, so equal
  values of different numeric types meet). Each rank sends its non-zero 64-bit
  words as rows ``(w, bits)``; the probe side ORs the words of all ranks
  (``bit_or`` grouped by word) and keeps a row when all its bit positions are
  set: one hash semi join per hash function. False positives only: a row whose
  key is in the build side always passes.

A NULL key never passes (NULLs never match an equality join).
"""

from __future__ import annotations

from dataclasses import dataclass

from squall.driver.ir import nodes as L
from squall.driver.ir.sqlgen import InputRef, Templated, q, render
from squall.driver.planner.exprs import hashable

#: hash functions of a Bloom filter (k); with ≥10 bits per key the false-positive rate is about 1-2 %
HASHES = 3
#: output columns of a Bloom filter partial
BLOOM_COLUMNS = ("w", "bits")


@dataclass(frozen=True)
class JoinFilter:
    """One filter the planner decided on: from stage ``stage`` to the scan of ``table``."""

    kind: str  # keys | bloom | local
    stage: int  # the filter stage (0 for ``local``)
    input: str  # the exchange input name of the filter stage (x<stage>; "" for ``local``)
    probe_cols: tuple[str, ...]  # the scan's internal column names, one per key
    key_types: tuple[str, ...]  # DuckDB types of the build keys (numbers hash as DOUBLE)
    bits: int = 0
    table: str = ""
    keep: float = 1.0
    label: str = ""
    #: ``local``: the build side's distinct keys, computed on every rank (a replicated scan)
    source: L.Node | None = None


@dataclass(frozen=True)
class BuiltFilter:
    """A filter stage already planned over a subtree's key columns ``cols`` (see bloom.py's reuse)."""

    cols: tuple[str, ...]
    kind: str
    stage: int
    input: str
    key_types: tuple[str, ...]
    bits: int


def _hash_sql(cols: list[str], types: tuple[str, ...]) -> str:
    parts = [hashable(c, t) for c, t in zip(cols, types)]
    return f"hash({', '.join(parts)})"


def _positions(h: str, bits: int) -> list[str]:
    return [f"((({h} & 4294967295) + {i} * ({h} >> 32)) % {bits})" for i in range(HASHES)]


def build_sql(kind: str, key_sql: list[str], key_types: tuple[str, ...], bits: int) -> str:
    """Template (``{0}`` = the build side) of one rank's partial filter."""
    not_null = " AND ".join(f"{k} IS NOT NULL" for k in key_sql)
    if kind == "keys":
        cols = ", ".join(f"{k} AS {q(f'k{i}')}" for i, k in enumerate(key_sql))
        return f"SELECT DISTINCT {cols}\nFROM {{0}} AS t\nWHERE {not_null}"
    h = _hash_sql(key_sql, key_types)
    pos = "((__h & 4294967295) + r.i * (__h >> 32)) % " + str(bits)
    return (
        f"SELECT (p >> 6)::INTEGER AS w, bit_or(CAST(1::UBIGINT << (p & 63)::UBIGINT AS UBIGINT)) AS bits\n"
        f"FROM (SELECT {pos} AS p FROM (SELECT {h} AS __h FROM {{0}} AS t WHERE {not_null}) AS h, "
        f"range({HASHES}) AS r(i)) AS p\nGROUP BY 1"
    )


def build_node(kind: str, side: L.Node, keys: list[str], key_types: tuple[str, ...], bits: int) -> Templated:
    out = BLOOM_COLUMNS if kind == "bloom" else tuple(f"k{i}" for i in range(len(keys)))
    return Templated((side,), build_sql(kind, keys, key_types, bits), out)


def probe_sql(f: JoinFilter, names: tuple[str, ...]) -> str:
    """Template (``{0}`` = the scan, ``{1}`` = the received filter partials) keeping matching rows."""
    cols = ", ".join(f"t.{q(n)}" for n in names)
    keys = [q(c) for c in f.probe_cols]
    not_null = " AND ".join(f"{k} IS NOT NULL" for k in keys)
    if f.kind in ("keys", "local"):
        on = " AND ".join(f"t.{k} = f.{q(f'k{i}')}" for i, k in enumerate(keys))
        return f"SELECT {cols}\nFROM (SELECT * FROM {{0}} AS t WHERE {not_null}) AS t\nSEMI JOIN {{1}} AS f ON {on}"
    h = _hash_sql([f"t.{k}" for k in keys], f.key_types)
    joins = []
    for i, p in enumerate(_positions("t.__h", f.bits)):
        joins.append(
            f"SEMI JOIN __bf AS f{i} ON f{i}.w = ({p} >> 6)::INTEGER "
            f"AND (f{i}.bits >> ({p} & 63)::UBIGINT) & 1 = 1"
        )
    return (
        f"WITH __bf AS (SELECT w, bit_or(bits) AS bits FROM {{1}} AS f GROUP BY w)\n"
        f"SELECT {cols}\nFROM (SELECT *, {h} AS __h FROM {{0}} AS t WHERE {not_null}) AS t\n"
        + "\n".join(joins)
    )


def probe_node(f: JoinFilter, scan: L.Node, filter_cols: tuple[str, ...]) -> Templated:
    """``scan`` keeping only rows that may match the build side."""
    keys: L.Node = f.source if f.source is not None else InputRef(f.input, filter_cols)
    return Templated((scan, keys), probe_sql(f, scan.names), scan.names)


@dataclass(frozen=True)
class FilterProbe(Templated):
    """A scan kept to the rows that may match a join filter (``label`` says which)."""

    label: str = ""


def apply_filters(ctx: object, scan: L.Scan, out: L.Node) -> L.Node:
    """``out`` (the planned ``scan``) behind the join filters the planner decided for this scan, the one
    estimated to keep the fewest rows first: it alone reads the scan, each next one what the one before kept
    (TPC-DS Q25: three tickets' keys before one month's dates on ``store_sales``)."""
    pending = getattr(ctx, "join_filters", {}).pop(id(scan), [])
    for f in sorted(pending, key=lambda f: f.keep):
        assert isinstance(f, JoinFilter)
        cols = BLOOM_COLUMNS if f.kind == "bloom" else tuple(f"k{i}" for i in range(len(f.probe_cols)))
        node = probe_node(f, out, cols)
        out = FilterProbe(node.inputs, node.template, node.out, f.label)
    return out


def named_probes(node: L.Node) -> tuple[L.Node, tuple[tuple[str, str, str, str], ...]]:
    """``node`` with every join filter's rows read from a name (``__jf0``, ``__jf1``…), and per filter
    (label, SQL of the rows before it, SQL of the rows after it, name), inner filters first (a filter's
    SQL may read an earlier one's name). The worker runs each filter once, keeps its rows under its name
    and counts both sides; counting a filter inside the stage's SQL would run its join twice."""
    found: list[tuple[str, str, str, str]] = []

    def swap(n: L.Node) -> L.Node:
        n = L.with_children(n, swap)
        if not isinstance(n, FilterProbe):
            return n
        name = f"__jf{len(found)}"
        found.append((n.label, render(n.inputs[0]), render(n), name))
        return InputRef(name, n.names)

    named = swap(node)
    return named, tuple(found)
