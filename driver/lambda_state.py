"""What the Lambda platform's driver and workers agree on: the invocation tree and the run's S3 keys.

Invocation tree (Lambada style, two levels): the driver invokes ⌈W/f⌉ first-level workers, one per
block of ``f`` consecutive ranks; each first-level worker invokes the other ranks of its block (one
invocation each) before it runs its own rank, the block's first. A worker whose range holds more than
``f`` ranks (a re-invocation never does) splits the rest into at most ``f`` blocks the same way, so the
depth is ⌈log_f W⌉ in general and 2 for the default ``f = ⌈√W⌉``.

Run state lives next to the query's exchange objects, under ``<exchange prefix>/_run/`` (the exchange's
clean-up deletes it with the rest)::

    _run/plan.json                    the plan, when the event would exceed the async payload limit
    _run/s/<rank>/a<n>/start-<ms>     attempt n of rank started at epoch <ms> (key only, empty body)
    _run/s/<rank>/a<n>/hb             heartbeat, rewritten every ``heartbeat_s`` (its ETag changes)
    _run/s/<rank>/a<n>/sent-<stage>   the rank has sent its output of <stage>
    _run/s/<rank>/a<n>/stage-<stage>  the rank has finished <stage> (progress)
    _run/s/<rank>/a<n>/done           JSON: the WorkerReport dict, billed ms, the result key (rank 0)
    _run/s/<rank>/a<n>/error          JSON: {kind, message}
    _run/result-a<n>.arrow            rank 0's result (Arrow IPC file)

The driver reads all of it with one LIST per 1,000 keys per poll and GETs only ``done``/``error``
objects (once each) and the result: the key names carry the rest.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

ASYNC_PAYLOAD_LIMIT = 256 * 1024  # bytes; AWS documents 256 KB (1 MB in newer regions): stay below
INLINE_PLAN_LIMIT = 200 * 1024  # plans above this travel as an S3 object


def default_fanout(world_size: int) -> int:
    """⌈√W⌉ (at least 2): about √W first-level invocations of about √W ranks each."""
    return max(2, math.isqrt(max(world_size, 1) - 1) + 1)


def blocks(lo: int, hi: int, fanout: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into at most ``fanout`` consecutive blocks of near-equal size."""
    n = hi - lo
    if n <= 0:
        return []
    count = min(fanout, n)
    size = math.ceil(n / count)
    return [(a, min(a + size, hi)) for a in range(lo, hi, size)]


def first_level(world_size: int, fanout: int) -> list[tuple[int, int]]:
    """The driver's invocations: blocks of ``fanout`` ranks."""
    return [(a, min(a + fanout, world_size)) for a in range(0, world_size, fanout)]


def children(lo: int, hi: int, fanout: int) -> list[tuple[int, int]]:
    """The invocations a worker with range ``[lo, hi)`` makes before running rank ``lo``."""
    return blocks(lo + 1, hi, fanout)


def tree_depth(world_size: int, fanout: int) -> int:
    """Levels of the invocation tree (the driver's invocations are level 1)."""

    def depth(lo: int, hi: int) -> int:
        kids = children(lo, hi, fanout)
        return 1 + max((depth(a, b) for a, b in kids), default=0)

    return max((depth(a, b) for a, b in first_level(world_size, fanout)), default=0)


def run_prefix(exchange_prefix: str) -> str:
    return f"{exchange_prefix}/_run"


def status_prefix(exchange_prefix: str) -> str:
    return f"{run_prefix(exchange_prefix)}/s/"


def attempt_prefix(exchange_prefix: str, rank: int, attempt: int) -> str:
    return f"{status_prefix(exchange_prefix)}{rank}/a{attempt}/"


def result_key(exchange_prefix: str, attempt: int) -> str:
    return f"{run_prefix(exchange_prefix)}/result-a{attempt}.arrow"


def plan_key(exchange_prefix: str) -> str:
    return f"{run_prefix(exchange_prefix)}/plan.json"


_STATUS = re.compile(r"(\d+)/a(\d+)/(start-\d+|hb|sent-\d+|stage-\d+|done|error)")


@dataclass(frozen=True)
class StatusKey:
    """One parsed status key: rank, attempt, what (``start``/``hb``/``sent``/``stage``/``done``/``error``)
    and its number (start time in epoch ms, or a stage id)."""

    rank: int
    attempt: int
    what: str
    number: int = 0


def parse_status_key(key: str, exchange_prefix: str) -> StatusKey | None:
    rest = key.removeprefix(status_prefix(exchange_prefix))
    m = _STATUS.fullmatch(rest)
    if m is None:
        return None
    what, _sep, number = m.group(3).partition("-")
    return StatusKey(int(m.group(1)), int(m.group(2)), what, int(number or 0))
