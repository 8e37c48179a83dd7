"""Skew-aware hash exchanges on a worker: histogram round, Neo-Join assignment, selective broadcast.

A stage whose ``Output.partitions`` is P > 0 does not send right away. Its output carries the full hash
of the partitioning key (``PART_COLUMN``); the rows fall into radix partitions ``hash % P``. The worker
holds the output of every member of the stage's co-partition group (``Output.group``: the two sides of a
hash join) until the last member was computed, then:

1. **histogram round**: each rank sends every rank a small table through the query's exchange (a
   broadcast with id ``HISTOGRAM_BASE + group``, so it works on every exchange): rows per (member,
   partition) it holds, and its top ``TOP_K`` key hashes per member (exact counts, taken in the
   partitions that are locally large);
2. **heavy hitters**: a key hash is hot when its rows (summed over the senders' reports) exceed
   ``HEAVY_SHARE`` * (all rows of the group / W), or its bytes (rows times its side's row width)
   ``HEAVY_SHARE`` * (all bytes of the group / W); or, taken only when selective broadcast handles it,
   when its rows exceed ``HEAVY_SHARE`` * (its own side's rows / W) — hot in a small side only, which
   would leave that side's exchange uneven while the group is balanced. Selective broadcast (Neo-Join): on the side that
   may keep rows (``Output.heavy`` "keep"/"either") the hot key's rows stay on the rank that holds
   them; the other side's rows of that key go to every rank. The preserved side of an outer join is the
   one that keeps: a copy of a preserved row on a rank without its matches would come out NULL-extended
   there. Hot keys on the null-supplied side of an outer join without residual condition (Q13: one
   customer with many orders) are kept **at their holders**: the ranks that reported the key keep their
   rows of it, the other ranks send theirs to the holder with the most, and the preserved side's rows of
   the key go to every holder only. Every copy of a preserved row then finds a match where it lands, so it
   is joined exactly once with each matching row and never NULL-extended. Rows with a NULL key never
   match and are never hot (``Output.null_sql``). A hot key on a side that may do neither is left to the
   assignment;
3. **assignment**: :func:`squall.operators.skew_assign.assign` over the combined histogram of the group
   (hot-key rows left out, the kept ones counted as each rank's base load) — every rank computes the
   same one; where the total's balance leaves a choice, each member's own exchange is kept balanced too
   (``MEMBER_SLACK``). Loads are bytes: each member's rows weigh its average row width (the senders' byte counts
   over their rows), so a few wide rows count as what they cost to receive;
4. **send** every member by the assignment; the worker then receives the members in plan order.

Order-preserving partitions (Neo-Join's MSB radix partitioning, which keeps locality): when the group is
keyed by one integer column (``Output.range_sql``, domain [``range_lo``, ``range_hi``] from the catalog),
each sender also counts its rows per equal-width key range (P ranges over the domain; histogram partitions
P..2P-1). Hash partitions spread every key range over all ranks; key ranges keep data that is clustered by
the key (files written in key order, date-correlated keys) on the rank that holds it. Step 3 computes both
assignments and takes the key ranges when their slowest rank's load is within ``SLACK`` of the hash's and
they keep more bytes where they are; otherwise the hash (a narrow filter can leave few ranges filled:
balance first).

Before 2-4, a run-time join decision (``Output.broadcast_limit`` > 0): the histogram also carries each
sender's bytes per member. When a member that may go to every rank (role "broadcast" or "either") holds
at most ``broadcast_limit`` bytes in all and sending it to the W - 1 other ranks moves fewer bytes than
hashing both members (its bytes * (W - 1) < the other member's bytes), that member goes whole to every
rank and the other member's rows stay on the rank that holds them: a broadcast join decided from actual
sizes, where the planner's estimates had said to hash both sides.

Held output: a member's rows come from DuckDB a batch at a time; the histogram's counts are taken as they
come, and the batches are held in memory up to the worker's limit (a quarter of its memory budget past the
runtime, :func:`squall.operators.received.receive_limit`), past it in an LZ4 Arrow file in its spill folder
(:func:`squall.operators.received.gather`, as received inputs are); step 4 reads them back a batch at a time and hands each batch, split by the decision, to the
exchange (``Exchange.send_pieces``), so the exchange holds no more than the output itself does. Finding heavy
hitters reads the held rows once more, only when a partition is locally large.

Each member's :class:`~squall.operators.worker.StageReport` gets a ``skew`` dict (partitions, the
assignment, rows kept local / moved, heavy hitters and how they were handled) that the driver merges
into ``Result.stats["exchanges"]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from squall.exchange.base import Exchange, ExchangeSpec
from squall.operators.partition import NULL_COLUMN, PART_COLUMN, RANGE_COLUMN, split_by_partition
from squall.operators.received import Received, counting, gather
from squall.operators.skew_assign import SLACK, assign, loads
from squall.plan import Output, Plan, Stage

#: exchange ids of histogram rounds: HISTOGRAM_BASE + the group's id (stage ids stay far below)
HISTOGRAM_BASE = 1_000_000
#: key hashes each sender reports per member
TOP_K = 8
#: a key is hot when its rows exceed this share of a rank's fair share of the group's rows
HEAVY_SHARE = 0.5
#: the histogram's ``partition`` of a row whose ``rows`` are a member's bytes on that sender
BYTES_ROW = -2
#: … of a row whose ``rows`` are an outer join member's rows with a NULL key on that sender (not partitioned:
#: the preserved side keeps them, the null-supplied side drops them)
NULL_ROW = -3

_HIST_SCHEMA = pa.schema(
    [
        ("sender", pa.int32()),
        ("member", pa.int32()),
        ("partition", pa.int32()),  # -1: a top-k key row (``hash`` set); -2: ``rows`` = the member's bytes;
        # -3: ``rows`` = the member's rows with a NULL key
        ("hash", pa.uint64()),
        ("rows", pa.int64()),
        ("bucket", pa.int32()),  # a top-k key row's key range (-1: the group has no key ranges)
    ]
)


@dataclass
class _Rows:
    """One batch of a held output with what the exchange derives per row from its extra columns."""

    data: pa.Table  # the rows as sent (PART_COLUMN, RANGE_COLUMN, NULL_COLUMN dropped)
    hashes: np.ndarray  # full key hash (uint64)
    parts: np.ndarray  # hash partition (int32)
    buckets: np.ndarray | None  # key range (Output.range_sql), else None
    null_key: np.ndarray | None  # whether the key is NULL (Output.null_sql), else None


@dataclass
class _Held:
    """A member's output, held until the histogram round (in memory, or in an LZ4 Arrow file past the limit:
    :func:`~squall.operators.received.gather`), with the counts the histogram needs, taken as the batches came."""

    stage: Stage
    report: Any  # the member's StageReport
    kept: Received | None = None  # the rows (set once they all came)
    rows: int = 0
    sending: int = 0  # Arrow bytes it would send (without the extra columns)
    nulls: int = 0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows per hash partition
    by_range: np.ndarray | None = None  # rows per key range

    def batches(self) -> Iterator[_Rows]:
        assert self.kept is not None
        for batch in self.kept.batches():
            yield _derive(batch, self.stage.output)

    def count(self, batch: pa.RecordBatch) -> None:
        """Add ``batch``'s rows to the histogram's counts."""
        out = self.stage.output
        part = _derive(batch, out)
        self.rows += part.data.num_rows
        self.sending += part.data.nbytes
        live = slice(None) if part.null_key is None else ~part.null_key
        if part.null_key is not None:
            self.nulls += int(part.null_key.sum())
        self.counts += np.bincount(part.parts[live], minlength=out.partitions)
        if self.by_range is not None and part.buckets is not None:
            self.by_range += np.bincount(part.buckets[live], minlength=out.partitions)

    def close(self) -> None:
        """Let go of the rows (their file removed)."""
        if self.kept is not None:
            self.kept.close()
            self.kept = None


def _derive(batch: pa.RecordBatch, out: Output) -> _Rows:
    """``batch`` of a held output as :class:`_Rows`."""
    hashes = batch.column(PART_COLUMN).to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    drop = [PART_COLUMN]
    buckets = null_key = None
    if out.range_sql:
        keys = pc.fill_null(batch.column(RANGE_COLUMN), out.range_lo).to_numpy(zero_copy_only=False)
        buckets = key_buckets(keys, out.range_lo, out.range_hi, out.partitions)
        drop.append(RANGE_COLUMN)
    if out.null_sql:
        nulls = pc.fill_null(batch.column(NULL_COLUMN), True).to_numpy(zero_copy_only=False)
        null_key = nulls.astype(bool, copy=False)
        drop.append(NULL_COLUMN)
    parts = (hashes % np.uint64(out.partitions)).astype(np.int32)
    data = pa.Table.from_batches([batch]).drop_columns(drop)
    return _Rows(data, hashes, parts, buckets, null_key)


def remote_bytes(addressed: dict[int, pa.Table], rank: int) -> int:
    """Arrow bytes of the tables in ``addressed`` (receiver → rows) bound for ranks other than ``rank``."""
    return sum(t.nbytes for r, t in addressed.items() if r != rank)


def key_buckets(keys: np.ndarray, lo: int, hi: int, partitions: int) -> np.ndarray:
    """Equal-width key ranges over [lo, hi]: range p holds keys lo + p·width … (order-preserving; keys
    outside the domain go to the first or last range)."""
    width = max(1, -(-(hi - lo + 1) // partitions))
    shifted = np.clip(keys.astype(np.int64, copy=False), lo, hi) - np.int64(lo)
    return np.minimum(shifted // np.int64(width), partitions - 1).astype(np.int32)


def groups_of(plan: Plan) -> dict[int, list[int]]:
    """Group id → member stage ids in plan order, for every skew-aware exchange of ``plan``."""
    out: dict[int, list[int]] = {}
    for stage in plan.stages:
        if stage.output.kind == "hash" and stage.output.partitions > 0:
            out.setdefault(stage.output.group or stage.id, []).append(stage.id)
    return out


class SkewExchanges:
    """One rank's skew-aware exchanges of a plan (see module doc)."""

    def __init__(
        self,
        plan: Plan,
        rank: int,
        exchange: Exchange,
        query_id: str,
        folder: str | None = None,
        limit: int = 0,
    ) -> None:
        self.plan, self.rank, self.exchange, self.query_id = plan, rank, exchange, query_id
        self.world = plan.world_size
        self.groups = groups_of(plan)
        self._group_of = {sid: g for g, members in self.groups.items() for sid in members}
        self._held: dict[int, list[_Held]] = {}
        #: a member's output past ``limit`` bytes is held in a file in ``folder`` (None: in memory)
        self.folder, self.limit = folder, limit
        self.held_to_disk = 0  # bytes of outputs held in ``folder``

    def handles(self, stage: Stage) -> bool:
        """True when ``stage``'s output goes through a skew-aware exchange."""
        return stage.id in self._group_of

    def ready(self, stage: Stage) -> list[Stage]:
        """The stages whose exchange this rank may receive once ``stage`` ran: ``[stage]`` for a plain
        exchange, nothing for a group member before the last, every member after the last."""
        group = self._group_of.get(stage.id)
        if group is None:
            return [stage]
        members = self.groups[group]
        return [self.plan.stage(s) for s in members] if stage.id == members[-1] else []

    def hold(
        self,
        stage: Stage,
        rows: pa.Table | pa.RecordBatchReader,
        report: Any,
        spec_of: Callable[[Stage], ExchangeSpec],
    ) -> float:
        """Keep ``stage``'s output (a table, or DuckDB's batches as they come: held in memory up to the limit,
        then on disk); after the group's last member, run the histogram round and send all. Returns the
        seconds the histogram round and the sending took (0 before the last member)."""
        group = self._group_of[stage.id]
        out = stage.output
        held = _Held(stage, report)
        held.counts = np.zeros(out.partitions, np.int64)
        held.by_range = np.zeros(out.partitions, np.int64) if out.range_sql else None
        self._held.setdefault(group, []).append(held)
        try:  # the histogram's counts taken as the batches come
            held.kept = gather(counting(rows, held.count), self.limit, self.folder, "held", rows.schema)
            report.rows_out, report.bytes_out = held.rows, held.sending
            self.held_to_disk += held.sending if held.kept.on_disk else 0
            if stage.id != self.groups[group][-1]:
                return 0.0
            t0 = time.perf_counter()
            self._flush(group, self._held[group], spec_of)
        except BaseException:
            self.close()
            raise
        for member in self._held.pop(group):
            member.close()
        return time.perf_counter() - t0

    def close(self) -> None:
        """Let go of every held output (a failed query: their files removed)."""
        for members in self._held.values():
            for member in members:
                member.close()
        self._held.clear()

    # --- the group's exchange ------------------------------------------------------------------------

    def _histogram(self, members: list[_Held]) -> pa.Table:
        cols: dict[str, list[int]] = {name: [] for name in _HIST_SCHEMA.names}

        def add(m: int, partition: list[int], rows: list[int], hashes: list[int] | None = None,
                buckets: list[int] | None = None) -> None:  # fmt: skip
            n = len(rows)
            cols["sender"] += [self.rank] * n
            cols["member"] += [m] * n
            cols["partition"] += partition
            cols["hash"] += [0] * n if hashes is None else hashes
            cols["rows"] += rows
            cols["bucket"] += [-1] * n if buckets is None else buckets

        for m, held in enumerate(members):
            nparts = held.stage.output.partitions
            add(m, [BYTES_ROW], [int(held.sending)])  # the bytes it would send
            if held.stage.output.null_sql:
                add(m, [NULL_ROW], [held.nulls])
            counts = held.counts
            nz = np.nonzero(counts)[0]
            add(m, nz.tolist(), counts[nz].tolist())
            if held.by_range is not None:  # key ranges: partitions P..2P-1
                nz = np.nonzero(held.by_range)[0]
                add(m, (nz + nparts).tolist(), held.by_range[nz].tolist())
            if held.stage.output.heavy and held.rows:
                # candidates only in locally large partitions: a hot key makes its partition large
                big = counts > max(2.0 * held.rows / nparts, 1.0)
                if not big.any():
                    continue
                found, found_ranges = [], []
                for part in held.batches():
                    in_big = big[part.parts]
                    if part.null_key is not None:  # a NULL key matches nothing: never a heavy hitter
                        in_big &= ~part.null_key
                    found.append(part.hashes[in_big])
                    if part.buckets is not None:
                        found_ranges.append(part.buckets[in_big])
                cand = np.concatenate(found)
                if len(cand):
                    vc = pc.value_counts(pa.array(cand))
                    values = vc.field("values").to_numpy(zero_copy_only=False)
                    cnts = vc.field("counts").to_numpy(zero_copy_only=False)
                    idx = np.argsort(-cnts, kind="stable")[:TOP_K]
                    top = values[idx]
                    ranges = None
                    if found_ranges:  # each key's range, from one of its rows
                        cand_ranges = np.concatenate(found_ranges)
                        ranges = [int(cand_ranges[np.argmax(cand == h)]) for h in top]
                    add(m, [-1] * len(top), cnts[idx].tolist(), top.tolist(), ranges)
        return pa.table(cols, schema=_HIST_SCHEMA)

    def _flush(self, group: int, members: list[_Held], spec_of: Callable[[Stage], ExchangeSpec]) -> None:
        t0 = time.perf_counter()
        ranks = tuple(range(self.world))
        spec = ExchangeSpec(self.query_id, HISTOGRAM_BASE + group, ranks, ranks, "broadcast")
        self.exchange.send(spec, {r: self._histogram(members) for r in ranks})
        hist = self.exchange.receive(spec)
        decision = decide(hist, members_heavy=[m.stage.output.heavy for m in members], world=self.world,
                          partitions=members[0].stage.output.partitions,
                          broadcast_limit=members[0].stage.output.broadcast_limit)  # fmt: skip
        histogram_s = time.perf_counter() - t0
        for m, held in enumerate(members):
            self._send(m, held, decision, spec_of(held.stage), histogram_s)

    def _send(self, m: int, held: _Held, d: Decision, spec: ExchangeSpec, histogram_s: float) -> None:
        """Send ``held`` by the decision, a batch at a time (the exchange writes them as they come)."""
        totals = {"kept": 0, "moved": 0, "kept_heavy": 0, "bcast": 0, "nulls": 0, "remote": 0}
        assert held.kept is not None
        schema = held.kept.data.schema
        data_schema = pa.schema([f for f in schema if f.name not in (PART_COLUMN, RANGE_COLUMN, NULL_COLUMN)])
        if d.whole_broadcast >= 0:  # the run-time broadcast join (see module doc)
            whole = m == d.whole_broadcast
            self.exchange.send_pieces(spec, data_schema, self._whole(held, whole, totals))
            held.report.bytes_to_others = totals["remote"]
            held.report.skew = {
                "partitions": held.stage.output.partitions,
                "assignment": "run-time broadcast join",
                "run_time": "broadcast to every rank" if whole else "kept where it is",
                "partitions_per_rank": [0] * self.world,
                "rows_kept_local": 0 if whole else held.rows,
                "rows_moved": held.rows * (self.world - 1) if whole else 0,
                "heavy_hitters": 0,
                "heavy_handling": d.handling,
                "heavy_rows_kept": 0,
                "heavy_rows_broadcast": 0,
                "histogram_s": histogram_s,
            }
            return
        by_range = d.by_range and held.by_range is not None
        self.exchange.send_pieces(spec, data_schema, self._addressed(m, held, d, by_range, totals))
        held.report.bytes_to_others = totals["remote"]
        held.report.skew = {
            "partitions": held.stage.output.partitions,
            "assignment": "histogram+locality" + (", key ranges" if by_range else ""),
            "partitions_per_rank": np.bincount(d.assignment, minlength=self.world).tolist(),
            "rows_kept_local": totals["kept"],
            "rows_moved": totals["moved"],
            "heavy_hitters": d.heavy_count,
            "heavy_handling": d.handling,
            "heavy_rows_kept": totals["kept_heavy"],
            "heavy_rows_broadcast": totals["bcast"],
            "histogram_s": histogram_s,
        }
        if totals["nulls"]:  # an outer join's NULL keys match nothing
            what = "dropped" if held.stage.output.heavy == "null_supplied" else "kept_local"
            held.report.skew[f"null_key_rows_{what}"] = totals["nulls"]

    def _whole(self, held: _Held, whole: bool, totals: dict[str, int]) -> Iterator[dict[int, pa.Table]]:
        """A run-time broadcast join's member: every batch to every rank (``whole``), else kept here."""
        for part in held.batches():
            data, empty = part.data, part.data.slice(0, 0)
            addressed = {r: data if whole or r == self.rank else empty for r in range(self.world)}
            totals["remote"] += remote_bytes(addressed, self.rank)
            yield addressed

    def _addressed(
        self, m: int, held: _Held, d: Decision, by_range: bool, totals: dict[str, int]
    ) -> Iterator[dict[int, pa.Table]]:
        """Each batch of ``held`` split by receiver as the decision says (module doc, step 4)."""
        keep = d.keep.get(m, set())
        bcast = d.broadcast.get(m, set())
        keep_arr = np.fromiter(keep, np.uint64, len(keep))
        everywhere = bcast - d.holders.keys()
        everywhere_arr = np.fromiter(everywhere, np.uint64, len(everywhere))
        for part in held.batches():
            data, hashes = part.data, part.hashes
            buckets = part.buckets if by_range else None
            dest = d.assignment[buckets if buckets is not None else part.parts].astype(np.int32)
            if part.null_key is not None and (nulls := int(part.null_key.sum())):
                # an outer join's NULL keys match nothing: the preserved side's rows stay where they are, the
                # null-supplied side's are dropped (they would come out nowhere)
                totals["nulls"] += nulls
                if held.stage.output.heavy == "null_supplied":
                    live = ~part.null_key
                    data, dest, hashes = data.filter(pa.array(live)), dest[live], hashes[live]
                else:
                    dest[part.null_key] = self.rank
            kept_heavy = 0
            if keep:
                mask = np.isin(hashes, keep_arr)
                dest[mask] = self.rank
                for h in (
                    keep & d.holders.keys()
                ):  # kept at their holders: a rank that is none sends to the first
                    if self.rank not in d.holders[h]:
                        away = hashes == np.uint64(h)
                        dest[away] = d.holders[h][0]
                        mask &= ~away
                kept_heavy = int(mask.sum())
            extra: list[tuple[pa.Table, tuple[int, ...]]] = []  # (rows, the ranks they all go to)
            if bcast and len(hashes):
                for h in sorted(bcast & d.holders.keys()):  # to the key's holders only
                    mask = hashes == np.uint64(h)
                    if mask.any():
                        extra.append((data.filter(pa.array(mask)), d.holders[h]))
                        data, dest, hashes = data.filter(pa.array(~mask)), dest[~mask], hashes[~mask]
                mask = np.isin(hashes, everywhere_arr)
                if mask.any():
                    extra.append((data.filter(pa.array(mask)), tuple(range(self.world))))
                    data, dest = data.filter(pa.array(~mask)), dest[~mask]
                totals["bcast"] += sum(t.num_rows for t, _to in extra)
            with_dest = data.append_column(PART_COLUMN, pa.array(dest.astype(np.int32)))
            parts = split_by_partition(with_dest, self.world)
            for rows, to in extra:
                for r in to:
                    parts[r] = pa.concat_tables([parts[r], rows])
            addressed = {r: parts[r] for r in range(self.world)}
            totals["remote"] += remote_bytes(addressed, self.rank)
            local = int((dest == self.rank).sum()) - kept_heavy
            totals["kept"] += local
            totals["moved"] += int(len(dest)) - local - kept_heavy
            totals["kept_heavy"] += kept_heavy
            yield addressed


@dataclass
class Decision:
    """What every rank derives from the histogram round (identical on every rank)."""

    assignment: np.ndarray
    #: member → key hashes whose rows stay on their rank / go to every rank
    keep: dict[int, set[int]] = field(default_factory=dict)
    broadcast: dict[int, set[int]] = field(default_factory=dict)
    heavy_count: int = 0
    handling: str = "none"
    #: the member that goes whole to every rank while the others stay in place (-1: none)
    whole_broadcast: int = -1
    #: partitions are the key ranges (``_Held.buckets``), not hash partitions
    by_range: bool = False
    #: hot keys kept at their holders (outer joins): key hash → the ranks that keep its rows, most first;
    #: the keeping member's other ranks send their rows of it to the first, the other member's rows of it
    #: go to all of them (instead of every rank)
    holders: dict[int, tuple[int, ...]] = field(default_factory=dict)


def decide(
    hist: pa.Table, *, members_heavy: list[str], world: int, partitions: int, broadcast_limit: float = 0.0
) -> Decision:
    """Heavy hitters and the assignment from the gathered histograms (pure; deterministic); or the
    run-time broadcast join when ``broadcast_limit`` allows it (see module doc)."""
    sender = hist.column("sender").to_numpy()
    member = hist.column("member").to_numpy()
    part = hist.column("partition").to_numpy()
    hashes = hist.column("hash").to_numpy()
    rows = hist.column("rows").to_numpy()
    sizes = [int(rows[(part == BYTES_ROW) & (member == m)].sum()) for m in range(len(members_heavy))]
    if (small := _broadcast_member(sizes, members_heavy, world, broadcast_limit)) >= 0:
        other = sum(sizes) - sizes[small]
        return Decision(
            assignment=np.zeros(partitions, dtype=np.int64),
            handling=f"run-time broadcast join: member {small} ({sizes[small]} bytes) to every rank, "
            f"the other side ({other} bytes) stays in place",
            whole_broadcast=small,
        )
    bucket = hist.column("bucket").to_numpy()
    is_hist = (part >= 0) & (part < partitions)
    is_range = part >= partitions
    is_key = part == -1
    # loads in bytes (Neo-Join balances the network phase): a member's rows weigh its average row width
    nulls = part == NULL_ROW
    width = _row_widths(
        sizes, [int(rows[(is_hist | nulls) & (member == m)].sum()) for m in range(len(sizes))]
    )
    weighed = np.rint(rows * width[member]).astype(np.int64)
    # per member: held[m, s, p] is member m's load of partition p on sender s
    members = len(members_heavy)
    held = np.zeros((members, world, partitions), dtype=np.int64)
    np.add.at(held, (member[is_hist], sender[is_hist], part[is_hist]), weighed[is_hist])
    ranged = np.zeros((members, world, partitions), dtype=np.int64) if is_range.any() else None
    if ranged is not None:
        np.add.at(
            ranged, (member[is_range], sender[is_range], part[is_range] - partitions), weighed[is_range]
        )
    # a key is hot when its rows exceed HEAVY_SHARE of a rank's fair share of the group's rows, or its bytes
    # of the group's bytes (in rows alone, a narrow side's many rows would hide a wide side's hot key)
    row_threshold = HEAVY_SHARE * int(rows[is_hist].sum()) / max(world, 1)
    byte_threshold = HEAVY_SHARE * int(weighed[is_hist].sum()) / max(world, 1)
    # global counts of the reported keys, per member
    counts: dict[tuple[int, int], int] = {}
    for m, h, n in zip(member[is_key].tolist(), hashes[is_key].tolist(), rows[is_key].tolist()):
        counts[m, h] = counts.get((m, h), 0) + n
    keep: dict[int, set[int]] = {}
    bcast: dict[int, set[int]] = {}
    holders: dict[int, tuple[int, ...]] = {}
    hot = sorted({h for (m, h), n in counts.items() if n > row_threshold or n * width[m] > byte_threshold})
    # hot within its own side only (a small side's exchange would be uneven): taken when selective
    # broadcast handles it, else left alone (the group's balance does not depend on it)
    member_rows = [int(rows[is_hist & (member == m)].sum()) for m in range(len(members_heavy))]
    side_hot = sorted(
        {h for (m, h), n in counts.items() if n > HEAVY_SHARE * member_rows[m] / max(world, 1)} - set(hot)
    )
    handled = at_holders = unhandled = side_handled = 0
    # load that stays where it is, per member and rank: kept hot keys, preserved NULL keys
    base = np.zeros((members, world), dtype=np.int64)
    kept_nulls = nulls & np.isin(member, [m for m, role in enumerate(members_heavy) if role == "preserved"])
    np.add.at(base, (member[kept_nulls], sender[kept_nulls]), weighed[kept_nulls])
    for h in hot + side_hot:
        per = {m: counts.get((m, h), 0) * float(width[m]) for m in range(len(members_heavy))}  # bytes
        k = max(per, key=lambda m: (per[m], -m))  # the hottest side keeps its rows …
        others = [m for m in per if m != k]
        mask = is_key & (hashes == np.uint64(h)) & (member == k)
        if _may_keep(members_heavy[k]) and all(
            _may_broadcast(members_heavy[o]) and per[o] * (world - 1) <= per[k] for o in others
        ):
            handled += 1
            side_handled += h in side_hot
        elif h in side_hot:
            continue
        elif members_heavy[k] == "null_supplied" and all(members_heavy[o] == "preserved" for o in others):
            reported = sorted(zip((-rows[mask]).tolist(), sender[mask].tolist()))
            holders[h] = tuple(dict.fromkeys(s for n, s in reported if n < 0))  # most rows first
            if not holders[h] or any(per[o] * (len(holders[h]) - 1) > per[k] for o in others):
                del holders[h]
                unhandled += 1
                continue
            at_holders += 1
        else:
            unhandled += 1
            continue
        keep.setdefault(k, set()).add(h)
        for o in others:  # … the other side's rows of it go to every rank (or to the key's holders)
            bcast.setdefault(o, set()).add(h)
        # the kept rows leave their partition's histogram and load their own rank
        p = int(np.uint64(h) % np.uint64(partitions))
        for s, n, b in zip(sender[mask].tolist(), weighed[mask].tolist(), bucket[mask].tolist()):
            held[k, s, p] = max(held[k, s, p] - n, 0)
            if ranged is not None and b >= 0:
                ranged[k, s, b] = max(ranged[k, s, b] - n, 0)
            base[k, s] += n
    assignment, by_range = _assignment(held, ranged, base)
    parts = []
    if handled:
        parts.append(f"{handled} selective broadcast")
    if at_holders:
        parts.append(f"{at_holders} kept at their holders (outer join: the preserved side's rows go to them)")
    if unhandled:
        parts.append(f"{unhandled} left to the assignment (this join must move both sides' rows)")
    return Decision(
        assignment=assignment,
        keep=keep,
        broadcast=bcast,
        heavy_count=len(hot) + side_handled,
        handling=", ".join(parts) or "none",
        by_range=by_range,
        holders=holders,
    )


def _row_widths(sizes: list[int], rows: list[int]) -> np.ndarray:
    """Bytes per row of each member from the senders' byte and row counts; all 1 (loads in rows) when a
    member with rows has no byte count (histograms without byte rows)."""
    if not any(sizes) or any(n and not b for b, n in zip(sizes, rows)):
        return np.ones(max(len(sizes), 1))
    return np.array([b / n if n else 1.0 for b, n in zip(sizes, rows)])


def _assignment(held: np.ndarray, ranged: np.ndarray | None, base: np.ndarray) -> tuple[np.ndarray, bool]:
    """The hash partitions' assignment, or the key ranges' (True) when they balance as well (within
    ``SLACK`` of the hash's slowest rank) and keep more of the (byte-weighted) load where it is. ``held``,
    ``ranged``: (members, W, P) loads; ``base``: (members, W)."""
    total_base = base.sum(axis=0)
    by_hash = assign(held.sum(axis=0), total_base, members=held, member_base=base)
    if ranged is None:
        return by_hash, False
    by_range = assign(ranged.sum(axis=0), total_base, members=ranged, member_base=base)
    slowest_hash = int(loads(held.sum(axis=0), by_hash, total_base).max())
    slowest_range = int(loads(ranged.sum(axis=0), by_range, total_base).max())
    if slowest_range <= slowest_hash * (1.0 + SLACK) and _local(ranged.sum(axis=0), by_range) > _local(
        held.sum(axis=0), by_hash
    ):
        return by_range, True
    return by_hash, False


def _local(held: np.ndarray, assignment: np.ndarray) -> int:
    """Load (rows, or bytes when weighed) that stays on the rank holding it under ``assignment``."""
    return int(held[assignment, np.arange(held.shape[1])].sum())


def _may_keep(role: str) -> bool:
    """Whether a member with join role ``role`` may keep rows on the rank that holds them."""
    return role in ("keep", "either", "preserved")


def _may_broadcast(role: str) -> bool:
    """Whether a member with join role ``role`` may send rows to every rank."""
    return role in ("broadcast", "either", "null_supplied")


def _broadcast_member(sizes: list[int], roles: list[str], world: int, limit: float) -> int:
    """Of a two-member group, the member to send whole to every rank, or -1: the smaller one that may be
    broadcast while the other may keep its rows, within ``limit`` bytes and moving fewer bytes than
    hashing both."""
    if limit <= 0 or world < 2 or len(sizes) != 2:
        return -1
    for b in sorted((0, 1), key=lambda m: (sizes[m], m)):
        k = 1 - b
        ok = _may_broadcast(roles[b]) and _may_keep(roles[k])
        if ok and sizes[b] <= limit and sizes[b] * (world - 1) < sizes[k]:
            return b
    return -1
