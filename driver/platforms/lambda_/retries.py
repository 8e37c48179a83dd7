"""When the Lambda driver invokes a rank again: a dead attempt, or one duplicate of a straggler.

- *dead*: an attempt that did not start within ``start_timeout_s`` of its invocation, or whose heartbeat
  has not changed for ``dead_after_s`` (a crash, a timeout) → a new attempt, up to ``max_attempts``;
- *straggler*: a rank that has not sent its output of a stage max(``straggler_s``, 3 x the time the first
  half of the senders took) after half of that stage's senders did → one duplicate (the first attempt to
  finish wins).

New attempts are harmless thanks to the exchange's deterministic keys and ``If-None-Match`` writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from squall.driver.platforms.lambda_.run import Attempt, Run
from squall.errors import WorkerError
from squall.plan import Plan


def relaunches(
    plan: Plan, run: Run, settings: Mapping[str, Any], now: float
) -> Iterator[tuple[int, int, str]]:
    """``(rank, attempt, reason)`` for each rank to invoke again now, recorded in ``run`` as it goes;
    WorkerError when a rank has used up its ``max_attempts``."""
    for stage in plan.stages:  # half of a stage's senders have sent: remember when
        senders = stage.output.senders if stage.output.kind != "result" else ()
        sent = len(run.sent.get(stage.id, ()))
        if sent and stage.id not in run.first_sent_at:
            run.first_sent_at[stage.id] = now
        if senders and stage.id not in run.half_sent_at and sent >= math.ceil(len(senders) / 2):
            run.half_sent_at[stage.id] = now
    for rank in range(run.world_size):
        if rank in run.done:
            continue
        atts = run.attempts[rank]
        live = [a for a in atts if not a.finished and not dead(a, now, settings)]
        if live:
            if len(atts) == 1 and straggling(plan, run, rank, now, float(settings["straggler_s"])):
                run.duplicates.append({"rank": rank, "attempt": len(atts), "after_s": round(now, 3)})
                yield rank, len(atts), "straggler"
            continue
        last = atts[-1]
        reason = "did not start" if last.started_ms is None else "heartbeat lost"
        if len(atts) >= int(settings["max_attempts"]):
            raise WorkerError(f"rank {rank} failed: {reason} in {len(atts)} attempts")
        for a in atts:
            a.finished = True  # given up on
        run.retries.append({"rank": rank, "attempt": len(atts), "reason": reason})
        yield rank, len(atts), reason


def dead(a: Attempt, now: float, settings: Mapping[str, Any]) -> bool:
    if a.started_ms is None:
        return now - a.invoked_at > float(settings["start_timeout_s"])
    return now - a.hb_seen_at > float(settings["dead_after_s"])


def straggling(plan: Plan, run: Run, rank: int, now: float, straggler_s: float) -> bool:
    for stage in plan.stages:
        if stage.output.kind == "result" or rank not in stage.output.senders:
            continue
        if rank in run.sent.get(stage.id, ()):
            continue
        since = run.half_sent_at.get(stage.id)
        if since is None:
            return False
        spread = since - run.first_sent_at.get(stage.id, since)  # how long the faster half took
        return now - since > max(straggler_s, 3 * spread)
    return False
