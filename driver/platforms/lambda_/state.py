"""The Lambda run's S3 keys, which the platform's driver and workers agree on (run-state keys).

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
objects (once each) and the result: the key names carry the rest. The invocation tree is in
:mod:`squall.driver.platforms.lambda_.tree`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ASYNC_PAYLOAD_LIMIT = 256 * 1024  # bytes; AWS documents 256 KB (1 MB in newer regions): stay below
INLINE_PLAN_LIMIT = 200 * 1024  # plans above this travel as an S3 object


def run_prefix(exchange_prefix: str) -> str:
    return f"{exchange_prefix}/_run"


def status_prefix(exchange_prefix: str) -> str:
    return f"{run_prefix(exchange_prefix)}/s/"


def attempt_prefix(exchange_prefix: str, rank: int, attempt: int) -> str:
    return f"{status_prefix(exchange_prefix)}{rank}/a{attempt}/"


def result_key(exchange_prefix: str, attempt: int, rank: int = 0) -> str:
    """Rank 0's result object; other ranks write one only as parts of a range-partitioned ORDER BY."""
    part = f"-r{rank}" if rank else ""
    return f"{run_prefix(exchange_prefix)}/result{part}-a{attempt}.arrow"


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
