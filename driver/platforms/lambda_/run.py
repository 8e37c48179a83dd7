"""The Lambda driver's view of a running query: every attempt of every rank, read from the status keys.

:func:`poll` is one round: one LIST per 1,000 status keys (see :mod:`squall.driver.platforms.lambda_.state`),
a GET of each new ``done``/``error`` document; the first real error a rank wrote is raised
(:class:`~squall.errors.QueryRuntimeError` for the user's mistakes, :class:`~squall.errors.WorkerError`
otherwise). Aborted ranks (stopped by another rank's failure) are not errors of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from squall.driver.platforms.lambda_ import state as keys
from squall.errors import QueryRuntimeError, UserError, WorkerError, squall_error


@dataclass
class Attempt:
    rank: int
    attempt: int
    invoked_at: float  # driver clock
    reason: str = "first"
    started_ms: int | None = None
    hb_etag: str | None = None
    hb_seen_at: float = 0.0
    finished: bool = False


@dataclass
class Run:
    """What the driver knows about a running query (from the status keys)."""

    world_size: int
    attempts: dict[int, list[Attempt]] = field(default_factory=dict)
    sent: dict[int, set[int]] = field(default_factory=dict)  # stage -> ranks
    first_sent_at: dict[int, float] = field(default_factory=dict)
    half_sent_at: dict[int, float] = field(default_factory=dict)
    stages_done: dict[int, set[int]] = field(default_factory=dict)  # stage -> ranks
    done: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> done doc (first wins)
    closed_docs: list[dict[str, Any]] = field(default_factory=list)  # every done/error doc read
    seen: set[str] = field(default_factory=set)  # done/error keys already read
    retries: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    invocations: int = 0
    probed: bool = False  # the silent-start probe ran (platform._probe_if_silent)
    requests: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str, n: int = 1) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + n

    def attempt(self, rank: int, number: int) -> Attempt | None:
        return next((a for a in self.attempts.get(rank, []) if a.attempt == number), None)

    def unfinished(self) -> list[Attempt]:
        return [a for atts in self.attempts.values() for a in atts if not a.finished]


def poll(run: Run, s3: Any, config: dict[str, Any], now: float) -> bool:
    """One LIST round over the status keys; GETs new done/error objects. True when something changed."""
    bucket, prefix = config["bucket"], config["prefix"]
    changed = False
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=keys.status_prefix(prefix))
    for page in pages:
        run.count("list")
        for obj in page.get("Contents", []):
            sk = keys.parse_status_key(obj["Key"], prefix)
            if sk is None:
                continue
            att = run.attempt(sk.rank, sk.attempt)
            if att is None:  # a child's attempt 0 seen before we recorded it (cannot happen) or stray
                continue
            if sk.what == "start" and att.started_ms is None:
                att.started_ms, att.hb_seen_at, changed = sk.number, now, True
            elif sk.what == "hb" and obj.get("ETag") != att.hb_etag:
                att.hb_etag, att.hb_seen_at = obj.get("ETag"), now
            elif sk.what == "sent" and sk.rank not in run.sent.setdefault(sk.number, set()):
                run.sent[sk.number].add(sk.rank)
                changed = True
            elif sk.what == "stage" and sk.rank not in run.stages_done.setdefault(sk.number, set()):
                run.stages_done[sk.number].add(sk.rank)
                changed = True
            elif sk.what in ("done", "error") and obj["Key"] not in run.seen:
                run.seen.add(obj["Key"])
                changed = True
                _closed(run, att, sk.what, s3, bucket, obj["Key"])
    return changed


def _closed(run: Run, att: Attempt, what: str, s3: Any, bucket: str, key: str) -> None:
    run.count("get")
    doc = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    doc.update(rank=att.rank, attempt=att.attempt, outcome=what)
    att.finished = True
    run.closed_docs.append(doc)
    if what == "done":
        run.done.setdefault(att.rank, doc)
        return
    if doc["kind"] == "aborted":
        return
    if doc["kind"] == "user":  # the rank's own error class when it is one of Squall's user errors
        same = squall_error(str(doc.get("error", "")), doc["message"])
        raise same if isinstance(same, UserError) else QueryRuntimeError(doc["message"])
    err = WorkerError(f"rank {att.rank} failed: {doc['message']}")
    err.__notes__ = [doc.get("traceback", "")]
    raise err
