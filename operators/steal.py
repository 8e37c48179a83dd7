"""Work stealing of scan splits (I-Store: queue-based execution with remote work stealing).

I-Store (Ziegler, Binnig, Röhm, *Skew-resilient query processing for fast networks*) breaks a
scan into work elements kept in one work queue per partition; a compute node pops its own queue
sequentially and, once it is empty, steals elements from the queues of straggling nodes. Here a
work element is one split (one row group) of a scan marked ``steal`` by the planner, and rank
r's queue is ``ScanInput.splits[r]``. The queues live in the exchange as *claims*
(:meth:`squall.exchange.base.Exchange.claim`): a split is read by the rank that claims it first.

One rank, in order:

1. pops its own queue from the head: claim a split, read it if the claim was won;
2. steals: lists the claims, picks the rank with the most unclaimed rows (its "remaining work")
   and claims that rank's last unclaimed split (from the tail, away from the owner's head); on a
   lost race it lists again; it stops when every split of the scan is claimed;
3. reads any split the final listing says it owns but it has not read: those an earlier attempt
   of the same rank (a retried or duplicated worker) claimed. So every attempt of a rank reads
   exactly the splits the claims give that rank, and every split is read by exactly one rank.

Which rank reads a split does not matter to the plan (the planner marks only scans whose rows may
lie on any rank); the stage's SQL runs over everything the rank read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from squall.exchange.base import Exchange
from squall.operators.duck import ParquetView
from squall.operators.scan import read_splits
from squall.operators.storage import Storage
from squall.plan import ScanInput, Split


@dataclass
class StealReport:
    """What one rank did in one stealing scan (``Result.stats["steals"]``)."""

    stage: int
    scan: str
    planned: int = 0  # splits in this rank's own queue
    read: int = 0  # splits this rank read: own + stolen + reclaimed
    own: int = 0  # of its own queue
    stolen: int = 0  # from other ranks' queues
    stolen_from: dict[int, int] = field(default_factory=dict)  # victim rank -> splits
    lost: int = 0  # own splits another rank took
    reclaimed: int = 0  # splits an earlier attempt of this rank had claimed
    rows: int = 0  # rows of the splits read (before the scan's filters, as the plan counts them)
    nbytes: int = 0  # compressed bytes of the splits read (planner's figures)
    claims: int = 0  # claim requests
    lists: int = 0  # claim listings
    enabled: bool = True  # False: the exchange has no claims; the planned splits were read

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["stolen_from"] = {str(k): v for k, v in sorted(self.stolen_from.items())}
        return d


def item_id(scan: str, owner: int, index: int) -> str:
    """The claim id of split ``index`` of ``owner``'s queue of ``scan``."""
    return f"{scan}.{owner}.{index}"


def steal_scan(
    inp: ScanInput,
    stage: int,
    ranks: Sequence[int],
    rank: int,
    exchange: Exchange,
    query_id: str,
    read: Callable[[Split], pa.Table],
) -> tuple[list[pa.Table], StealReport]:
    """Read this rank's share of ``inp`` by claiming and stealing splits (module doc).

    ``ranks`` are the stage's ranks (the queues); ``read`` reads one split (and applies any
    injected delay). Returns the tables read, in claim order, and the report.
    """
    queues = {r: inp.splits_for(r) for r in ranks}
    own = queues.get(rank, ())
    report = StealReport(stage, inp.name, planned=len(own))
    tables: list[pa.Table] = []
    if not exchange.supports_claims:
        report.enabled = False
        for split in own:
            tables.append(read(split))
        report.read = report.own = len(own)
        report.nbytes = sum(s.nbytes for s in own)
        report.rows = sum(s.rows for s in own)
        return tables, report
    done: set[str] = set()

    def take(owner: int, index: int) -> bool:
        item = item_id(inp.name, owner, index)
        report.claims += 1
        if not exchange.claim(query_id, item):
            return False
        tables.append(read(queues[owner][index]))
        report.nbytes += queues[owner][index].nbytes
        report.rows += queues[owner][index].rows
        done.add(item)
        report.read += 1
        return True

    for index in range(len(own)):
        if take(rank, index):
            report.own += 1
        else:
            report.lost += 1
    while True:
        report.lists += 1
        owners = exchange.claims(query_id, f"{inp.name}.")
        victim, left = _victim(inp.name, queues, owners, rank)
        if victim is None:
            break
        if take(victim, left[-1]):
            report.stolen += 1
            report.stolen_from[victim] = report.stolen_from.get(victim, 0) + 1
    for r, splits in queues.items():
        for index in range(len(splits)):
            item = item_id(inp.name, r, index)
            if owners.get(item) == rank and item not in done:
                tables.append(read(splits[index]))
                report.nbytes += splits[index].nbytes
                report.rows += splits[index].rows
                done.add(item)
                report.read += 1
                report.reclaimed += 1
    return tables, report


def _victim(
    scan: str, queues: dict[int, tuple[Split, ...]], owners: dict[str, int], rank: int
) -> tuple[int | None, list[int]]:
    """The other rank with the most unclaimed rows (lowest rank on ties) and its unclaimed indexes."""
    best: tuple[int, int] | None = None
    best_left: list[int] = []
    for r in sorted(queues):
        if r == rank:
            continue
        left = [i for i in range(len(queues[r])) if item_id(scan, r, i) not in owners]
        if not left:
            continue
        rows = sum(queues[r][i].rows or 1 for i in left)
        if best is None or rows > best[0]:
            best, best_left = (rows, r), left
    return (best[1] if best else None), best_left


def split_reader(
    inp: ScanInput,
    query: Callable[[str], pa.Table] | None,
    storage_of: Callable[[str], Storage],
    delay_s: float = 0.0,
) -> Callable[[Split], pa.Table]:
    """A ``read`` for :func:`steal_scan`: one split through DuckDB's own Parquet reader when
    ``query`` (the stage's sandbox, whose allowed files include the scan's) is given — with the
    scan's pushed-down filters applied as it reads, so only passing rows become Arrow (the stage's
    SQL applies them again) — else through the Storage. ``delay_s`` per row group is the
    ``slow_scan`` fault."""
    where = " AND ".join(f"({f})" for f in inp.filters)

    def read(split: Split) -> pa.Table:
        if delay_s:
            time.sleep(delay_s * len(split.row_groups))
        if query is None:
            return read_splits(inp, (split,), storage_of)
        path = os.path.abspath(split.path.removeprefix("file://"))
        view = ParquetView(inp.columns, ((path, () if split.whole_file else split.row_ranges),))
        return query(f"SELECT * FROM ({view.sql()}) AS t WHERE {where}" if where else view.sql())

    return read


def native_files(inp: ScanInput) -> tuple[str, ...]:
    """Every local file of a scan, any rank's splits: what the sandbox allows (a stealing scan reads them all)."""
    return tuple(sorted({os.path.abspath(s.path.removeprefix("file://")) for per in inp.splits for s in per}))
