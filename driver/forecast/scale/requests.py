"""S3 request counts of one exchange, from the S3 exchange's own formulas: one small table to update.

Each entry of :data:`FORMULAS` maps an exchange *version* to a function
``(shape) -> ExchangeCounts``. ``"s3-v1"`` is ``squall/exchange/s3.py`` before issue 15 (Nov 2026) (see its module
doc, "Reading", "Two levels" and "Request accounting"):

- every sender PUTs one object per level unless all its pieces are addressed to itself;
- every reader GETs the 64 KiB *tail* of every object that holds a range for it (``get_index``, one per
  reader/object pair; a rank never reads its own object) and, when its range lies outside the tail,
  ``⌈range / part_size⌉`` data GETs (``get_data``);
- one level: W PUTs, W·(W-1) index GETs for a hash exchange; two levels (hash, senders == receivers,
  W ≥ 16 with ``levels="auto"``) route through a g x g grid, g = ⌈√W⌉: 2W PUTs and ≈ 2W·(g-1) index GETs;
- polling misses (a 404 per pending sender per round) and abort HEADs (one per round that still misses
  something) depend on timing: the simulator counts them, these formulas do not.

``"s3-v2"`` is ``squall/exchange/s3.py`` after issue 15 (its module doc, "Keys", "Reading" and "Request
accounting"): the range lengths travel in the key names, so

- PUTs as in v1 (one object per sender and level unless every destination is the sender itself);
- one LIST per reading rank and level when nobody waits (one level with more than ``GROUP_SIZE`` senders:
  one per group of 64 senders holding another rank's object); waiting adds one LIST per round;
- one data GET per reader/object pair whose range has data, ``⌈range / part_size⌉`` for big ranges, none
  for empty pieces (``piece_bytes == 0``, and the pairs :class:`PairWeights` says are empty: senders
  without rows, receivers no key hashes to — ``ExchangeShape.sender_hit`` / ``receiver_hit``, filled by
  :mod:`squall.driver.forecast.scale.emptiness`); no index GETs, no misses — except when a key would outgrow
  ``MAX_KEY_BYTES`` (a one-level hash exchange with hundreds of receivers): then v1's tail-index reads.

``"target"`` is what issue 15 asked of the next version (Lambada's counts): one data GET per
(sender, receiver) pair that has data (a piece small enough to sit in one request is that one GET),
offsets learned without a GET per pair (one LIST per receiver and level), bounded polling. Change the
table, not the simulator, when the exchange changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

#: ``squall.exchange.s3.DEFAULTS`` values the counts depend on
TAIL_BYTES = 64 * 1024
PART_SIZE = 16 * 1024 * 1024
TWO_LEVEL_MIN = 16
INDEX_ENTRY = 24
TRAILER = 16


@dataclass(frozen=True)
class ExchangeShape:
    """What the formulas need to know about one exchange.

    ``piece_bytes``: mean IPC bytes of one piece (hash: per (sender, receiver); broadcast and gather:
    per sender). ``levels``: 1, 2 or "auto" (the exchange's option).
    """

    kind: str
    senders: tuple[int, ...]
    receivers: tuple[int, ...]
    piece_bytes: float = 0.0
    levels: int | str = "auto"
    two_level_min: int = TWO_LEVEL_MIN
    tail_bytes: int = TAIL_BYTES
    part_size: int = PART_SIZE
    #: per rank (index = rank; empty: 1 for every rank) the probability that sender s's piece for a
    #: receiver that gets rows at all is non-empty (0 for a sender without rows; see :mod:`.emptiness`)
    sender_hit: tuple[float, ...] = ()
    #: per rank the probability that receiver q gets any rows (measured: 0 or 1; empty: 1 for all)
    receiver_hit: tuple[float, ...] = ()

    def pairs(self) -> PairWeights:
        """The per-pair non-empty probabilities of this shape."""
        world = max([*self.senders, *self.receivers, 0]) + 1
        return PairWeights.of(self.kind, world, self.sender_hit, self.receiver_hit)


@dataclass(frozen=True)
class PairWeights:
    """Which (sender, receiver) pieces carry rows: ``P[s, q] = x[s] * m[q]`` (expected; 0/1 when known).

    ``x[s]``: sender s's hit rate on a receiver that gets rows, ``m[q]``: receiver q gets rows at all
    (broadcast and gather: 1 for every receiver). The s3-v2 exchange skips empty ranges, so its data GETs
    are these probabilities summed over the remote pairs (one level) or over the grid's ranges (two levels:
    a level-1 range s→f holds s's pieces for f's column; a level-2 range f→q holds the pieces for q of every
    sender routed through f).
    """

    x: np.ndarray
    m: np.ndarray

    @staticmethod
    def of(kind: str, world: int, sender_hit: Sequence[float], receiver_hit: Sequence[float]) -> PairWeights:
        x = (
            np.ones(world)
            if not len(sender_hit)
            else np.clip(np.asarray(sender_hit, dtype=float)[:world], 0, 1)
        )
        if kind != "hash" or not len(receiver_hit):
            m = np.ones(world)
        else:
            m = np.clip(np.asarray(receiver_hit, dtype=float)[:world], 0, 1)
        if len(x) < world:
            x = np.concatenate([x, np.ones(world - len(x))])
        if len(m) < world:
            m = np.concatenate([m, np.ones(world - len(m))])
        return PairWeights(x, m)

    @property
    def trivial(self) -> bool:
        return bool((self.x >= 1).all() and (self.m >= 1).all())

    def one_level(self, senders: Sequence[int], receivers: Sequence[int]) -> np.ndarray:
        """Expected non-empty remote pieces per receiver (indexed by rank), one level."""
        out = np.zeros(len(self.x))
        is_sender = np.zeros(len(self.x), dtype=bool)
        is_sender[list(set(senders))] = True
        total = float(self.x[is_sender].sum())
        q = np.asarray(sorted(set(receivers)), dtype=np.int64)
        out[q] = self.m[q] * (total - np.where(is_sender[q], self.x[q], 0.0))
        return out

    def grid_terms(self, ranks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """On the grid of ``ranks`` (positions = sorted ranks): receivers with rows per column (length g)
        and, per forwarder position, the probability its level-2 range for a receiver with rows is
        non-empty (1 - Π over the senders routed through it of (1 - x))."""
        order = sorted(set(ranks))
        width = len(order)
        g = grid_width(width)
        idx = np.asarray(order, dtype=np.int64)
        x, m = self.x[idx], self.m[idx]
        n_col = np.bincount(np.arange(width) % g, weights=m, minlength=g)
        miss = np.ones(width)
        for start in range(0, width, g):
            row_miss = float(np.prod(1.0 - x[start : start + g]))
            for c in range(min(g, width)):
                f = start + c
                miss[f - g if f >= width else f] *= row_miss
        return n_col, 1.0 - miss

    def level1(self, x_sender: float | np.ndarray, n_col: float) -> np.ndarray:
        """Probability that a sender's level-1 range for a forwarder (one column's receivers) is non-empty."""
        return 1.0 - np.power(1.0 - np.asarray(x_sender, dtype=float), n_col)

    def two_level(self, ranks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Expected non-empty level-1 and level-2 ranges read per rank (indexed by rank), on the grid of
        ``ranks`` (``squall.exchange.s3.Grid``): the reader's own object excluded."""
        order = sorted(set(ranks))
        width = len(order)
        g = grid_width(width)
        idx = np.asarray(order, dtype=np.int64)
        x, m = self.x[idx], self.m[idx]
        n_col, y = self.grid_terms(order)
        col = np.arange(width) % g
        lvl1 = np.zeros(width)
        for start in range(0, width, g):
            row = np.arange(start, min(start + g, width))
            for c in range(min(g, width)):
                f = start + c - (g if start + c >= width else 0)
                lvl1[f] += float(self.level1(x[row[row != f]], n_col[c]).sum())
        fwd_of_col: dict[int, set[int]] = {}
        for start in range(0, width, g):
            for c in range(min(g, width)):
                f = start + c
                fwd_of_col.setdefault(c, set()).add(f - g if f >= width else f)
        lvl2 = np.array([m[q] * sum(y[f] for f in fwd_of_col[col[q]] if f != q) for q in range(width)])
        out1, out2 = np.zeros(len(self.x)), np.zeros(len(self.x))
        out1[idx], out2[idx] = lvl1, lvl2
        return out1, out2


@dataclass
class ExchangeCounts:
    """Requests of one exchange, totals and per rank (numpy arrays indexed by rank).

    ``reads[level][r]`` is how many objects rank r reads at that level (1-based), ``data_gets[level][r]``
    its data GETs; ``puts[level][r]`` 0/1. ``list_`` counts LIST requests when nobody waits (s3-v2 and
    target: one per reading rank, level and group prefix; each polling round that still misses a sender
    adds one per pending group, which the simulator counts).
    """

    levels: int
    put: int
    get_index: int
    get_data: int
    list_: int = 0
    reads: dict[int, np.ndarray] = field(default_factory=dict)
    data_gets: dict[int, np.ndarray] = field(default_factory=dict)
    puts: dict[int, np.ndarray] = field(default_factory=dict)
    read_bytes: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def get(self) -> int:
        """GET requests the formulas fix (misses excluded)."""
        return self.get_index + self.get_data

    def as_dict(self) -> dict[str, int]:
        return {"put": self.put, "get_index": self.get_index, "get_data": self.get_data, "list": self.list_}


def choose_levels(shape: ExchangeShape) -> int:
    """The exchange's own rule (``squall.exchange.s3.choose_levels``)."""
    eligible = shape.kind == "hash" and sorted(shape.senders) == sorted(shape.receivers)
    if not eligible or str(shape.levels) == "1":
        return 1
    if str(shape.levels) == "2":
        return 2
    return 2 if len(shape.senders) >= shape.two_level_min else 1


def grid_width(world: int) -> int:
    return math.isqrt(world - 1) + 1 if world > 1 else 1


@lru_cache(maxsize=64)
def grid_reads(width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per position on the grid of ``width`` ranks: level-1 objects it reads as forwarder and level-2
    objects it reads as receiver (own objects excluded), and whether it PUTs at level 1 and 2 (not when
    every piece is its own); mirrors ``squall.exchange.s3.Grid``."""
    g = grid_width(width)
    pos = np.arange(width)

    def forwarder(row_start: int, col: int) -> int:
        p = row_start + col
        return p - g if p >= width else p

    lvl1 = np.zeros(width, dtype=np.int64)
    lvl2 = np.zeros(width, dtype=np.int64)
    fwd_rows: dict[int, set[int]] = {}
    for start in range(0, width, g):
        for col in range(g):
            if col >= width:
                break
            f = forwarder(start, col)
            fwd_rows.setdefault(f, set()).add(start)
    for f, rows in fwd_rows.items():
        srcs = {p for s in rows for p in range(s, min(s + g, width))}
        lvl1[f] = len(srcs - {f})
    served: dict[int, set[int]] = {}
    for q in pos:
        fwds = {forwarder(start, int(q) % g) for start in range(0, width, g)}
        lvl2[q] = len(fwds - {int(q)})
        for f in fwds:
            served.setdefault(f, set()).add(int(q))
    put1 = np.zeros(width, dtype=np.int64)
    for s in pos:
        row = (int(s) // g) * g
        put1[s] = int({forwarder(row, c) for c in range(min(g, width))} != {int(s)})
    put2 = np.array([int(f in served and served[f] != {f}) for f in range(width)], dtype=np.int64)
    return lvl1, lvl2, put1, put2


def _in_tail(n_pieces: int, piece: float, tail: int) -> int:
    """How many of an object's ``n_pieces`` equal pieces (the last ones) a tail GET already holds."""
    avail = tail - INDEX_ENTRY * n_pieces - TRAILER
    if avail <= 0:
        return 0
    return int(min(n_pieces, avail // max(piece, 1.0)))


def s3_v1(shape: ExchangeShape) -> ExchangeCounts:
    """Today's S3 exchange (module doc of ``squall/exchange/s3.py``)."""
    levels = choose_levels(shape)
    world = max([*shape.senders, *shape.receivers, 0]) + 1
    senders, receivers = set(shape.senders), set(shape.receivers)
    part = shape.part_size
    per_get = max(1, math.ceil(shape.piece_bytes / part)) if shape.piece_bytes > 0 else 1
    if levels == 1:
        puts = np.zeros(world, dtype=np.int64)
        for s in senders:
            puts[s] = 0 if receivers == {s} else 1
        n_pieces = len(receivers) if shape.kind == "hash" else 1
        reads = np.zeros(world, dtype=np.int64)
        data = np.zeros(world, dtype=np.int64)
        rbytes = np.zeros(world)
        order = sorted(receivers)
        in_tail = _in_tail(n_pieces, shape.piece_bytes, shape.tail_bytes)
        for i, r in enumerate(order):
            objs = len(senders) - (r in senders)
            reads[r] = objs
            tail_hit = (len(order) - i) <= in_tail if shape.kind == "hash" else in_tail >= 1
            data[r] = 0 if tail_hit else objs * per_get
            rbytes[r] = objs * shape.piece_bytes
        return ExchangeCounts(1, int(puts.sum()), int(reads.sum()), int(data.sum()),
                              reads={1: reads}, data_gets={1: data}, puts={1: puts},
                              read_bytes={1: rbytes})  # fmt: skip
    width = len(receivers)
    g = grid_width(width)
    lvl1, lvl2, puts1, puts2 = grid_reads(width)
    # level 1: a sender's object has g ranges (one per forwarder of its row), each ≈ g pieces
    range1 = shape.piece_bytes * g
    # level 2: a forwarder's object has one range per receiver of its column, each ≈ g pieces
    in_tail1 = _in_tail(g * g, shape.piece_bytes, shape.tail_bytes) // max(g, 1)
    in_tail2 = _in_tail(g * g, shape.piece_bytes, shape.tail_bytes) // max(g, 1)
    per1 = max(1, math.ceil(range1 / part)) if range1 > 0 else 1
    # readers whose range is among the last ``in_tail`` ranges of an object read it from the tail;
    # ranges are ordered by forwarder (level 1) / receiver (level 2) rank: column position in the row
    col = np.arange(width) % g
    tail_pos1 = col >= g - in_tail1
    data1 = np.where(tail_pos1, 0, lvl1 * per1)
    data2 = np.where(col >= g - in_tail2, 0, lvl2 * per1)
    return ExchangeCounts(
        2,
        int(puts1.sum() + puts2.sum()),
        int(lvl1.sum() + lvl2.sum()),
        int(data1.sum() + data2.sum()),
        reads={1: lvl1, 2: lvl2},
        data_gets={1: data1, 2: data2},
        puts={1: puts1, 2: puts2},
        read_bytes={1: lvl1 * range1, 2: lvl2 * range1},
    )


def target(shape: ExchangeShape) -> ExchangeCounts:
    """Issue 15's target: one GET per (sender, receiver) pair with data, one LIST per reader and level."""
    counts = s3_v1(shape)
    part = shape.part_size
    per_get = max(1, math.ceil(shape.piece_bytes * (grid_width(len(shape.receivers)) if counts.levels == 2
                                                    else 1) / part))  # fmt: skip
    data = {lvl: r * per_get for lvl, r in counts.reads.items()}
    lists = sum(int((r > 0).sum()) for r in counts.reads.values())
    return ExchangeCounts(counts.levels, counts.put, 0, int(sum(d.sum() for d in data.values())), lists,
                          reads=counts.reads, data_gets=data, puts=counts.puts,
                          read_bytes=counts.read_bytes)  # fmt: skip


GROUP_SIZE = 64  # squall.exchange.s3.DEFAULTS["group_size"]: senders per LIST prefix, one level
MAX_KEY_BYTES = 1024  # DEFAULTS["max_key_bytes"]
KEY_OVERHEAD = 72  # "<prefix>/<query id>/hhhh-x<id>-l<level>-g<group>/s<sender>_" with the default prefix


def _key_bytes(n_ranges: int, range_bytes: float) -> int:
    """Length of a v2 key carrying the schema length and ``n_ranges`` lengths in base 36."""
    digits = len(np.base_repr(int(max(range_bytes, 1.0)), 36))
    return KEY_OVERHEAD + (n_ranges + 1) * (digits + 1)


def s3_v2(shape: ExchangeShape) -> ExchangeCounts:
    """The S3 exchange after issue 15: lengths in the key names, one LIST per reader, one GET per pair."""
    v1 = s3_v1(shape)
    receivers = sorted(set(shape.receivers))
    g = grid_width(len(receivers)) if v1.levels == 2 else 1
    n_ranges = 1 if shape.kind == "broadcast" else (g if v1.levels == 2 else len(receivers))
    range_bytes = shape.piece_bytes * g
    if v1.levels == 1 and _key_bytes(n_ranges, range_bytes) > MAX_KEY_BYTES:
        lists = np.zeros_like(v1.reads[1])
        lists[v1.reads[1] > 0] = math.ceil(len(set(shape.senders)) / GROUP_SIZE)
        return ExchangeCounts(1, v1.put, v1.get_index, v1.get_data, int(lists.sum()), reads=v1.reads,
                              data_gets=v1.data_gets, puts=v1.puts, read_bytes=v1.read_bytes)  # fmt: skip
    per_get = max(1, math.ceil(range_bytes / shape.part_size)) if shape.piece_bytes > 0 else 0
    pairs = shape.pairs()
    if pairs.trivial:  # every pair has rows: one GET (or ⌈range / part⌉) per object read
        data = {lvl: r * per_get for lvl, r in v1.reads.items()}
    elif v1.levels == 1:  # empty pieces are not read (module doc); own objects are not read either
        data = {1: pairs.one_level(shape.senders, shape.receivers) * per_get}
    else:
        l1, l2 = pairs.two_level(receivers)
        data = {1: l1 * per_get, 2: l2 * per_get}
    if v1.levels == 1:
        senders = sorted(set(shape.senders))
        n_groups = math.ceil(len(senders) / GROUP_SIZE)
        pos = {s: i for i, s in enumerate(senders)}

        def groups_for(r: int) -> int:  # a group holding only the reader itself is not listed
            if r not in pos:
                return n_groups
            lone = pos[r] // GROUP_SIZE == n_groups - 1 and len(senders) % GROUP_SIZE == 1
            return n_groups - lone

        n_lists = sum(groups_for(r) for r in receivers if v1.reads[1][r])
    else:
        n_lists = sum(int((r > 0).sum()) for r in v1.reads.values())
    return ExchangeCounts(v1.levels, v1.put, 0, _total(data), n_lists, reads=v1.reads,
                          data_gets=data, puts=v1.puts, read_bytes=v1.read_bytes)  # fmt: skip


def _total(data: dict[int, np.ndarray]) -> int:
    """Total requests of per-rank (possibly expected, fractional) counts, rounded."""
    return int(round(float(sum(d.sum() for d in data.values()))))


#: how a receiver of each version polls (the simulator follows it): ``"get"`` — a GET per pending sender
#: per round (a 404 until the object exists) and a HEAD per round; ``"list"`` — one LIST per pending
#: group prefix per round, an abort HEAD at most once per ``ABORT_CHECK_S`` of waiting
POLLING: dict[str, str] = {"s3-v1": "get", "s3-v2": "list", "target": "list"}
#: ``squall.exchange.s3.DEFAULTS`` polling values: backoff 20 ms … 1 s (jittered), abort check period
POLL_MIN_S, POLL_MAX_S, ABORT_CHECK_S = 0.02, 1.0, 1.0


def list_groups(kind: str, senders: Sequence[int], levels: int) -> dict[int, int]:
    """Sender -> LIST group of an s3-v2 exchange level (one level: position // ``GROUP_SIZE``; two
    levels: one group per reader and level — a grid row at level 1, a column at level 2)."""
    if levels == 2:
        return {s: 0 for s in senders}
    return {s: i // GROUP_SIZE for i, s in enumerate(sorted(set(senders)))}


#: exchange version -> request formula; "s3-v2" is what exchange/s3.py does today, "s3-v1" before issue 15
FORMULAS: dict[str, Callable[[ExchangeShape], ExchangeCounts]] = {
    "s3-v1": s3_v1,
    "s3-v2": s3_v2,
    "target": target,
}
CURRENT = "s3-v2"


def exchange_counts(shape: ExchangeShape, version: str = CURRENT) -> ExchangeCounts:
    """The requests of one exchange under exchange ``version`` (a key of :data:`FORMULAS`)."""
    try:
        return FORMULAS[version](shape)
    except KeyError:
        raise ValueError(f"unknown exchange version {version!r} (known: {', '.join(FORMULAS)})") from None


def closed_form(kind: str, world: int, levels: int) -> dict[str, int]:
    """Lambada-style closed forms for a full exchange among ``world`` ranks (for tests and docs)."""
    if levels == 1:
        return {"put": world, "get_index": world * (world - 1) if kind == "hash" else world - 1}
    g = grid_width(world)
    return {"put": 2 * world, "get_index_max": 2 * world * (g - 1)}


def ranks_of(seq: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(seq))
