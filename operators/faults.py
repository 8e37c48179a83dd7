"""Fault injection for tests and chaos runs: ``SQUALL_FAULTS`` in the workers' environment.

Comma-separated rules, each ``kind:key=value:…``:

- ``crash:rank=R:stage=S`` — the worker process of rank R exits abruptly when stage S starts;
- ``delay:rank=R:seconds=X[:stage=S]`` — rank R sleeps X seconds before stage S (or every stage).

Rules that do not name a rank apply to every rank.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from squall.errors import OptionError


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int | None = None
    stage: int | None = None
    seconds: float = 0.0


def parse_faults(text: str | None) -> tuple[Fault, ...]:
    faults = []
    for rule in (text or "").split(","):
        rule = rule.strip()
        if not rule:
            continue
        kind, *pairs = rule.split(":")
        if kind not in ("crash", "delay"):
            raise OptionError(f"SQUALL_FAULTS: unknown fault kind {kind!r} in {rule!r}")
        fields: dict[str, str] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in ("rank", "stage", "seconds"):
                raise OptionError(f"SQUALL_FAULTS: bad field {pair!r} in {rule!r}")
            fields[key] = value
        try:
            faults.append(
                Fault(
                    kind,
                    int(fields["rank"]) if "rank" in fields else None,
                    int(fields["stage"]) if "stage" in fields else None,
                    float(fields.get("seconds", 0)),
                )
            )
        except ValueError:
            raise OptionError(f"SQUALL_FAULTS: bad number in {rule!r}") from None
    return tuple(faults)


def faults_from_env() -> tuple[Fault, ...]:
    return parse_faults(os.environ.get("SQUALL_FAULTS"))


def before_stage(faults: tuple[Fault, ...], rank: int, stage: int) -> None:
    """Apply the rules matching (rank, stage)."""
    for f in faults:
        if f.rank is not None and f.rank != rank:
            continue
        if f.stage is not None and f.stage != stage:
            continue
        if f.kind == "delay":
            time.sleep(f.seconds)
        elif f.kind == "crash":
            os._exit(17)
