"""Fault injection for tests and chaos runs: ``SQUALL_FAULTS`` in the workers' environment.

Comma-separated rules, each ``kind:key=value:…``:

- ``crash:rank=R:stage=S`` — the worker process of rank R exits abruptly when stage S starts;
- ``crash_after_write:rank=R`` — rank R exits abruptly right after it staged its part of a write (files
  written, nothing reported: what the commit must never pick up);
- ``delay:rank=R:seconds=X[:stage=S]`` — rank R sleeps X seconds before stage S (or every stage), waking
  early when the query is aborted or finished (the losing copy of a straggler's duplicate stops then);
- ``hang:rank=R:seconds=X[:stage=S]`` — like delay, but deaf to aborts: a rank stuck in work it cannot leave,
  which only the driver's drain timeout or a second Ctrl-C ends (by killing it);
- ``slow_scan:rank=R:seconds=X[:stage=S]`` — rank R sleeps X seconds before each row group it scans
  (in stage S, or every stage): a slow or overloaded worker, what work stealing is for;
- ``s3_error:rate=P`` — every S3 request of the process fails with probability P with a retryable
  ``503 SlowDown`` (a botocore ``before-send`` hook on every S3 client, see :func:`install_s3_errors`),
  so botocore's retry handler retries it and the exchange/storage counters record the retries.

Rules that do not name a rank apply to every rank. On the Lambda platform crash, delay, hang and slow_scan rules apply
to a rank's first attempt only: a re-invoked or duplicate rank runs clean (that is what the tests check).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from squall import aws
from squall.errors import OptionError


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int | None = None
    stage: int | None = None
    seconds: float = 0.0
    rate: float = 0.0


def parse_faults(text: str | None) -> tuple[Fault, ...]:
    faults = []
    for rule in (text or "").split(","):
        rule = rule.strip()
        if not rule:
            continue
        kind, *pairs = rule.split(":")
        if kind not in ("crash", "crash_after_write", "delay", "hang", "slow_scan", "s3_error"):
            raise OptionError(f"SQUALL_FAULTS: unknown fault kind {kind!r} in {rule!r}")
        fields: dict[str, str] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in ("rank", "stage", "seconds", "rate"):
                raise OptionError(f"SQUALL_FAULTS: bad field {pair!r} in {rule!r}")
            fields[key] = value
        try:
            faults.append(
                Fault(
                    kind,
                    int(fields["rank"]) if "rank" in fields else None,
                    int(fields["stage"]) if "stage" in fields else None,
                    float(fields.get("seconds", 0)),
                    float(fields.get("rate", 0)),
                )
            )
        except ValueError:
            raise OptionError(f"SQUALL_FAULTS: bad number in {rule!r}") from None
    return tuple(faults)


def faults_from_env() -> tuple[Fault, ...]:
    return parse_faults(os.environ.get("SQUALL_FAULTS"))


def before_stage(
    faults: tuple[Fault, ...], rank: int, stage: int, stop: Callable[[], bool] = lambda: False
) -> None:
    """Apply the rules matching (rank, stage); a delay ends early once ``stop()`` (checked each second) is true."""
    for f in faults:
        if f.rank is not None and f.rank != rank:
            continue
        if f.stage is not None and f.stage != stage:
            continue
        if f.kind in ("s3_error", "slow_scan"):
            continue
        if f.kind == "delay":
            until = time.monotonic() + f.seconds
            while (left := until - time.monotonic()) > 0 and not stop():
                time.sleep(min(1.0, left))
        elif f.kind == "hang":
            time.sleep(f.seconds)
        elif f.kind == "crash":
            os._exit(17)


def after_write(faults: tuple[Fault, ...], rank: int) -> None:
    """Apply ``crash_after_write`` rules matching ``rank``."""
    if any(f.kind == "crash_after_write" and f.rank in (None, rank) for f in faults):
        os._exit(17)


def scan_delay(faults: tuple[Fault, ...], rank: int, stage: int) -> float:
    """Seconds ``rank`` sleeps before each row group it scans in ``stage`` (``slow_scan`` rules)."""
    return sum(
        f.seconds
        for f in faults
        if f.kind == "slow_scan" and f.rank in (None, rank) and f.stage in (None, stage)
    )


_installed: list[float] = []


def s3_error_rate(faults: tuple[Fault, ...]) -> float:
    """The probability of an injected S3 error (0 when no ``s3_error`` rule)."""
    return max((f.rate for f in faults if f.kind == "s3_error"), default=0.0)


class _Raw:
    """The raw body botocore reads from an injected response."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_kwargs: object) -> Iterator[bytes]:
        yield self.body


_SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate. (injected by SQUALL_FAULTS)</Message></Error>"
)


def _s3_error_hook(rate: float, rng: random.Random) -> Callable[..., Any]:
    def before_send(request: Any, **_kwargs: Any) -> Any:
        if rng.random() >= rate:
            return None
        from botocore.awsrequest import AWSResponse

        return AWSResponse(request.url, 503, {"Content-Type": "application/xml"}, _Raw(_SLOWDOWN))

    return before_send


def install_s3_errors(rate: float, seed: int | None = None) -> None:
    """Make every S3 client created from now on in this process fail requests with probability ``rate``.

    Fault injection only: a :func:`squall.aws.add_client_hook` (once per process) gives every new
    S3 client (exchange, storage, status objects) a ``before-send`` hook that answers with a
    retryable 503 SlowDown instead of sending the request.
    """
    if rate <= 0 or _installed:
        return
    _installed.append(rate)
    rng = random.Random(seed)

    def hook(service: str, made: Any) -> None:
        if service == "s3":
            made.meta.events.register("before-send.s3", _s3_error_hook(rate, rng))

    aws.add_client_hook(hook)
