"""Range partitioning by sampled splitters: the sender side of a distributed ORDER BY.

For a stage whose output kind is ``range`` every sending rank, after running the stage's SQL:

1. takes a systematic sample of its rows (``sample_size(W)`` evenly spaced rows) and computes their
   **sort keys** with DuckDB's ``create_sort_key`` over the plan's keys and modifiers (ASC/DESC,
   NULLS FIRST/LAST): a BLOB whose byte order is exactly DuckDB's ORDER BY order (default binary
   collation) for any mix of types; each sampled key carries a weight, rows / sampled rows;
2. broadcasts the sample to every sender (exchange id :func:`sample_exchange_id`: one small round,
   through the same exchange as the data, so it works on every platform);
3. computes the same ``W - 1`` splitters as every other rank: the weighted quantiles of the pooled
   sample, in sender order then byte order (deterministic);
4. routes each row to the receiver whose key range holds it: with ``lo`` the number of splitters
   smaller than the row's key and ``hi`` the number smaller or equal, any receiver in ``lo..hi``
   keeps the concatenation sorted (the receivers in between hold only that key). A row goes to
   ``lo + (row number mod (hi - lo + 1))``, so a key equal to several splitters (a heavy key)
   is spread round-robin over their ranks instead of landing on one; distinct keys go to
   exactly one rank.

A sender holds its rows for the sample as received inputs are held (in memory up to the worker's share of its
budget, past it on disk: :func:`~squall.operators.received.gather`), reads them once for the sample and once
more to send them, a batch at a time (:meth:`~squall.exchange.base.Exchange.send_pieces`).

Each receiver then sorts its range; the result is the receivers' parts in rank order. A single
dominant key thus spreads over the ranks whose splitters it fills; only when *every* row has the
same key do all ranks hold an equal share of that key (still balanced); skew remains only for
many distinct keys whose weights the sample misjudged.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from squall.exchange.base import Exchange, ExchangeSpec
from squall.operators.duck import Sandbox
from squall.operators.partition import PART_COLUMN, addressed_batches
from squall.operators.received import Received
from squall.plan import Output

#: sampled keys per rank = SAMPLE_FACTOR * W (capped so the pooled sample stays below SAMPLE_TOTAL)
SAMPLE_FACTOR = 100
SAMPLE_TOTAL = 1_000_000
#: a range stage's sample round is exchange ``SAMPLE_ID_OFFSET + stage id`` (no plan has that many stages)
SAMPLE_ID_OFFSET = 1 << 20
_INPUT = "__squall_range"
_SAMPLE_SCHEMA = pa.schema([("sk", pa.binary()), ("w", pa.float64())])


def sample_size(world: int) -> int:
    """Keys each rank samples for ``world`` receivers."""
    return max(1, min(SAMPLE_FACTOR * world, SAMPLE_TOTAL // max(world, 1)))


def sample_exchange_id(stage_id: int) -> int:
    """The exchange id of stage ``stage_id``'s sample round (unique in the query, non-negative)."""
    return SAMPLE_ID_OFFSET + stage_id


def sort_key_sql(keys: Sequence[str], order: Sequence[str]) -> str:
    """``create_sort_key(...)`` over the sort keys: a BLOB in ORDER BY order.

    A constant trailing key keeps the result a BLOB (DuckDB returns a BIGINT for one fixed-size key).
    """
    args = [part for key, mod in zip(keys, order) for part in (key, f"'{mod}'")]
    args += ["''", "'ASC NULLS LAST'"]
    return f"create_sort_key({', '.join(args)})"


def _blob(value: bytes) -> str:
    return "'" + "".join(f"\\x{b:02X}" for b in value) + "'::BLOB"


def _count(splitters: Sequence[bytes], op: str, lo: int, hi: int) -> str:
    """SQL counting the splitters[lo:hi] that are ``op`` the key ``sk`` (sorted: a binary search)."""
    if lo == hi:
        return str(lo)
    mid = (lo + hi) // 2
    return (
        f"CASE WHEN {_blob(splitters[mid])} {op} sk THEN {_count(splitters, op, mid + 1, hi)}"
        f" ELSE {_count(splitters, op, lo, mid)} END"
    )


def splitters(sample: pa.Table, parts: int) -> list[bytes]:
    """The ``parts - 1`` weighted quantiles of a pooled sample (columns ``sk``, ``w``)."""
    if parts <= 1 or sample.num_rows == 0:
        return []
    pairs = sorted(zip(sample.column("sk").to_pylist(), sample.column("w").to_pylist()), key=lambda p: p[0])
    cum = np.cumsum([w for _k, w in pairs]).tolist()
    total = cum[-1]
    out = []
    for i in range(1, parts):
        j = min(bisect.bisect_left(cum, total * i / parts), len(pairs) - 1)
        out.append(pairs[j][0])
    return out


def _sample(db: Sandbox, rows: Received, output: Output, world: int) -> pa.Table:
    """The systematic sample of ``rows`` (one read of them, a batch at a time) as sort keys with weights."""
    n = rows.rows
    k = min(n, sample_size(world))
    if k == 0:
        return _SAMPLE_SCHEMA.empty_table()
    wanted = (np.arange(k, dtype=np.int64) * n) // k
    picked: list[pa.Table] = []
    start = 0
    for batch in rows.batches():
        lo, hi = np.searchsorted(wanted, [start, start + batch.num_rows])
        if hi > lo:
            picked.append(pa.Table.from_batches([batch]).take(pa.array(wanted[lo:hi] - start)))
        start += batch.num_rows
    db.register(_INPUT, pa.concat_tables(picked))
    try:
        keys = db.query(f"SELECT {sort_key_sql(output.keys, output.order)} AS sk FROM {_INPUT} AS t")
    finally:
        db.unregister(_INPUT)
    weights = pa.array(np.full(k, n / k), pa.float64())
    return pa.table([keys.column(0).cast(pa.binary()), weights], schema=_SAMPLE_SCHEMA)


def partition_ids(
    db: Sandbox, table: pa.Table, output: Output, cuts: Sequence[bytes], first: int = 0
) -> np.ndarray:
    """Receiver index (0-based, into ``output.receivers``) of every row of ``table``, whose first row is the
    sender's row ``first`` (a key equal to several splitters goes round-robin by row number)."""
    n = table.num_rows
    if not cuts or n == 0:
        return np.zeros(n, dtype=np.int64)
    lo, hi = _count(cuts, "<", 0, len(cuts)), _count(cuts, "<=", 0, len(cuts))
    sql = (
        f"SELECT {lo} AS lo, {hi} AS hi FROM "
        f"(SELECT {sort_key_sql(output.keys, output.order)} AS sk FROM {_INPUT} AS t) AS s"
    )
    db.register(_INPUT, table)
    try:
        bounds = db.query(sql)  # insertion order is preserved: row i of the result is row i of table
    finally:
        db.unregister(_INPUT)
    low = bounds.column("lo").to_numpy().astype(np.int64)
    span = bounds.column("hi").to_numpy().astype(np.int64) - low + 1
    return low + np.arange(first, first + n, dtype=np.int64) % span


def send_by_range(
    db: Sandbox, rows: Received, output: Output, exchange: Exchange, spec: ExchangeSpec, report: Any
) -> int:
    """Send this sender's ``rows`` (a stage output held in memory or on disk) by key range to
    ``output.receivers``, a batch at a time; returns its sample size (the sample round through ``exchange``
    happens here; see module doc). ``report`` gets ``bytes_to_others`` and ``partition_s``."""
    world = len(output.receivers)
    t0 = time.perf_counter()
    sample = _sample(db, rows, output, world)
    sample_spec = ExchangeSpec(
        spec.query_id, sample_exchange_id(spec.exchange_id), output.senders, output.senders, "broadcast"
    )
    exchange.send(sample_spec, dict.fromkeys(output.senders, sample))
    pooled = exchange.receive(sample_spec)
    cuts = splitters(pooled, world)
    report.partition_s += time.perf_counter() - t0
    report.bytes_to_others = 0

    def tagged() -> Iterator[pa.RecordBatch]:  # each row's receiver index in PART_COLUMN
        first = 0
        for batch in rows.batches():
            t = time.perf_counter()
            table = pa.Table.from_batches([batch])
            ids = partition_ids(db, table, output, cuts, first)
            first += table.num_rows
            batches = table.append_column(PART_COLUMN, pa.array(ids.astype(np.int32))).to_batches()
            report.partition_s += time.perf_counter() - t
            yield from batches

    pieces = addressed_batches(tagged(), output.receivers, exchange.rank, report)
    exchange.send_pieces(spec, rows.data.schema, pieces)
    return sample.num_rows
