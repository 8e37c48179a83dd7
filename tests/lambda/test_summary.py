"""The Lambda stats count every invocation of the tree, also those of an attempt whose document is not written yet."""

from __future__ import annotations

import time

from squall.driver.platforms.lambda_ import tree
from squall.driver.platforms.lambda_.platform import DEFAULT_SETTINGS
from squall.driver.platforms.lambda_.run import Attempt, Run
from squall.driver.platforms.lambda_.summary import details

SETTINGS = {**DEFAULT_SETTINGS, "region": "us-east-1"}


def test_first_ranges_cover_every_rank_once():
    for world, fanout in ((16, 4), (9, 3), (10, 4), (1, 2), (64, 8), (20, 2)):
        ranges = tree.first_ranges(world, fanout)
        assert sorted(ranges) == list(range(world))
        assert all(lo == rank and lo < hi <= world for rank, (lo, hi) in ranges.items())
        invocations = len(tree.first_level(world, fanout)) + sum(
            len(tree.children(lo, hi, fanout)) for lo, hi in ranges.values()
        )
        assert invocations == world  # one invocation per rank


def test_a_straggler_still_running_counts_the_children_it_invoked():
    """W=16, fanout 4: rank 4 (a first-level worker, children 5, 6, 7) is duplicated and its duplicate wins;
    when the query ends the straggler has written no document, but its three children were invoked."""
    now_ms = int(time.time() * 1000)
    run = Run(world_size=16, invocations=4 + 1)  # the driver: 4 first-level workers, 1 duplicate
    for rank in range(16):
        run.attempts[rank] = [Attempt(rank, 0, 0.0, started_ms=now_ms, finished=rank != 4)]
        if rank != 4:
            kids = len(tree.children(*tree.first_ranges(16, 4)[rank], 4))
            run.closed_docs.append({"billed_ms": 100, "memory_mb": 1024, "invocations": kids})
    run.attempts[4].append(Attempt(4, 1, 1.0, "straggler", started_ms=now_ms, finished=True))
    run.closed_docs.append({"billed_ms": 100, "memory_mb": 1024, "invocations": 0})
    run.duplicates.append({"rank": 4, "attempt": 1, "reason": "straggler"})
    out = details(run, time.time(), function="f", fanout=4, settings=SETTINGS, factory_requests={})
    lam = out["lambda"]
    assert lam["invocations"] == 16 + lam["duplicates"] + lam["retries"] == 17
