"""What a finished Lambda query reports beyond its result: the ``lambda`` stats and the query's cost.

The cost adds up every attempt's billed milliseconds and memory (from its ``done``/``error`` document;
attempts still running, such as the losing copy of a duplicate, are billed until now), the invocations
of the whole tree (a first attempt still running counts the children it invoked when it started), and the S3 requests of the workers, the driver's polling and the exchange factory
(priced by :func:`squall.driver.platforms.prices.query_cost`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping
from typing import Any

from squall.driver.platforms.lambda_ import tree
from squall.driver.platforms.lambda_.run import Run
from squall.driver.platforms.prices import query_cost


def details(
    run: Run,
    epoch0: float,
    *,
    function: str,
    fanout: int,
    settings: Mapping[str, Any],
    factory_requests: Mapping[str, int],
) -> dict[str, Any]:
    """``{"lambda": {...}, **cost}`` for a run that started at epoch ``epoch0``."""
    starts = sorted(
        a.started_ms / 1000 - epoch0 for atts in run.attempts.values() for a in atts[:1] if a.started_ms
    )
    billed: list[tuple[int, int]] = []
    requests: dict[str, int] = {}
    invocations = run.invocations
    for doc in run.closed_docs:
        billed.append((int(doc["billed_ms"]), int(doc["memory_mb"])))
        invocations += int(doc.get("invocations", 0))
        _add(requests, {"put": int(doc.get("status_puts", 0))})
        report = doc.get("report")
        if report:
            _add(requests, report["storage_requests"])
            _add(requests, report["exchange"].get("requests", {}))
    open_attempts = [a for atts in run.attempts.values() for a in atts if not a.finished and a.started_ms]
    ranges = tree.first_ranges(run.world_size, fanout)
    for a in open_attempts:  # still running (a losing duplicate): billed until now, at least
        billed.append((int((time.time() - (a.started_ms or 0) / 1000) * 1000), int(settings["memory_mb"])))
        if a.attempt == 0:  # its document is not written yet: the children it invoked when it started
            invocations += len(tree.children(*ranges[a.rank], fanout))
    _add(requests, run.requests)
    _add(requests, factory_requests)
    region = settings["region"] or os.environ.get("AWS_REGION") or "us-east-1"
    lam = {
        "function": function,
        "fanout": fanout,
        "tree_depth": tree.tree_depth(run.world_size, fanout),
        "invocations": invocations,
        "startup_s": {
            "first": round(starts[0], 3) if starts else None,
            "median": round(statistics.median(starts), 3) if starts else None,
            "all": round(starts[-1], 3) if starts else None,
        },
        "retries": len(run.retries),
        "duplicates": len(run.duplicates),
        # a duplicate "won" when the rank's answer came from it, not from the straggler it copied
        "relaunched": run.retries
        + [{**d, "won": run.done.get(d["rank"], {}).get("attempt") == d["attempt"]} for d in run.duplicates],
        "driver_requests": dict(run.requests),
        "memory_mb": settings["memory_mb"],
    }
    cost = query_cost(billed, invocations, requests, region=region,
                      architecture=str(settings["architecture"]))  # fmt: skip
    return {"lambda": lam, **cost}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + int(v)
