"""The CI fuzz budget: a fixed seed and number of queries, W cycling 1..4, on TPC-H SF0.01 (+ NULL-heavy twins).

Deterministic: the same queries every run. Fails on any wrong answer, and on any error or internal error that
is not an open bug already saved under ``tests/fuzz/cases`` (same kind and message); known open bugs are
reported as warnings. Refusals (``not supported: …``) are counted, never failures. Findings are not saved
from here: run ``benchmarks/fuzz.py`` to minimise and save them.
"""

from __future__ import annotations

import warnings

from .cases import load_cases
from .runner import bug_key, run

SEED = 20261123
QUERIES = 120


def _known_bugs() -> set[str]:
    known = set()
    for case in load_cases():
        if "xfail" in case.header and case.header.get("kind") in ("error", "internal"):
            known.add(bug_key(case.header["kind"], case.header.get("differs", "")))
    return known


def test_fuzz_budget(fuzz_oracle):
    stats = run(fuzz_oracle, SEED, QUERIES, cycle=True, minimize_failures=False, save=False)
    print(stats.summary())
    c = stats.counts
    assert stats.generated == QUERIES
    assert c["rejected"] <= QUERIES * 0.05, (
        f"the generator makes too many invalid queries: {stats.rejections}"
    )
    assert c["passed"] >= QUERIES * 0.5, stats.summary()
    known = _known_bugs()
    new = [
        f
        for f in stats.findings
        if f.outcome.kind == "wrong" or bug_key(f.outcome.kind, f.outcome.detail) not in known
    ]
    for f in stats.findings:
        if f not in new:
            warnings.warn(
                f"known open bug at W={f.outcome.workers}: {f.outcome.detail.splitlines()[0]}", stacklevel=1
            )
    assert not new, "\n".join(
        f"{f.outcome.kind} at W={f.outcome.workers}: {f.outcome.detail}\n  {f.sql}" for f in new
    )
