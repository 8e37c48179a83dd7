"""The fuzz loop shared by the CI test and ``benchmarks/fuzz.py``: generate, check, count, minimise, save."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .cases import CASES, load_cases, save_case
from .generator import QueryGenerator
from .minimize import minimize
from .oracle import Oracle, Outcome, refusal_reason


@dataclass
class Finding:
    index: int
    sql: str
    outcome: Outcome
    minimized: str | None = None
    fails_at: list[int] = field(default_factory=list)
    saved: Path | None = None


@dataclass
class Stats:
    generated: int = 0
    counts: Counter = field(
        default_factory=Counter
    )  # passed, rejected, refused, wrong, error, internal, timeout
    refusals: Counter = field(default_factory=Counter)
    rejections: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self, top: int = 10) -> str:
        c = self.counts
        lines = [
            f"generated {self.generated}, rejected by DuckDB {c['rejected']} "
            f"({100 * c['rejected'] / max(self.generated, 1):.1f}%), passed {c['passed']}, refused by Squall "
            f"{c['refused']}, wrong answers {c['wrong']}, errors {c['error']}, internal errors {c['internal']}, "
            f"Squall over its time limit {c['timeout']}; "
            f"{self.seconds:.1f} s ({self.seconds / max(self.generated, 1):.2f} s/query)"
        ]
        if self.refusals:
            lines.append("top refusal reasons:")
            lines += [f"  {n:5d}  {reason}" for reason, n in self.refusals.most_common(top)]
        if self.rejections:
            lines.append("top DuckDB rejections:")
            lines += [f"  {n:5d}  {reason}" for reason, n in self.rejections.most_common(5)]
        for f in self.findings:
            where = f" -> {f.saved}" if f.saved else ""
            lines.append(
                f"{f.outcome.kind} at W={f.outcome.workers} (query {f.index}){where}: "
                f"{' '.join(f.outcome.detail.split())[:300]}"
            )
            lines.append(f"  SQL: {f.minimized or f.sql}")
        return "\n".join(lines)


def bug_key(kind: str, detail: str) -> str:
    """Group findings by bug: errors by their message without literals, numbers and column names; wrong
    answers are not grouped (empty key)."""
    if kind == "wrong":
        return ""
    text = detail.splitlines()[0] if detail else ""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\b\w+\.\w+\b|\d+", "#", text)
    return f"{kind}:{text[:120]}"


def run(
    oracle: Oracle,
    seed: int,
    n: int,
    *,
    start: int = 0,
    cycle: bool = True,
    minimize_failures: bool = True,
    save: bool = True,
    cases: Path = CASES,
    max_per_bug: int = 2,
    log: Callable[[str], None] | None = None,
) -> Stats:
    """Run queries ``start .. start+n-1`` of ``seed`` over ``oracle.schema``; with ``cycle`` query i runs at
    W = workers[i % len], else at every worker count. Ctrl-C stops early and returns the counts so far."""
    gen = QueryGenerator(seed, schema=oracle.schema)
    stats = Stats()
    per_bug: Counter = Counter()
    for case in load_cases(cases):  # bugs already saved: at most ``max_per_bug`` cases each
        if case.header.get("kind") in ("error", "internal"):
            per_bug[bug_key(case.header["kind"], case.header.get("differs", ""))] += 1
    t0 = time.perf_counter()
    try:
        for i in range(start, start + n):
            sql = gen.query(i)
            workers = (oracle.workers[i % len(oracle.workers)],) if cycle else oracle.workers
            out = oracle.check(sql, workers)
            stats.generated += 1
            stats.counts[out.kind] += 1
            if out.kind == "refused":
                stats.refusals[refusal_reason(out.detail)] += 1
            elif out.kind == "rejected":
                stats.rejections[out.detail[:100]] += 1
            elif out.kind == "timeout":
                stats.findings.append(Finding(i, sql, out))
                if log:
                    log(f"[{i}] timeout at W={out.workers}: {out.detail}")
            elif out.failed:
                finding = Finding(i, sql, out)
                stats.findings.append(finding)
                key = bug_key(out.kind, out.detail)
                per_bug[key] += 1
                if log:
                    log(f"[{i}] {out.kind} at W={out.workers}: {' '.join(out.detail.split())[:200]}")
                if minimize_failures and (not key or per_bug[key] <= max_per_bug):
                    w = out.workers or 1
                    want = out.signature()

                    def still_fails(text: str, w: int = w, want: tuple[str, str] = want) -> bool:
                        return oracle.check(text, (w,)).signature() == want

                    finding.minimized = minimize(sql, still_fails, log=log)
                    finding.fails_at = oracle.failing_workers(finding.minimized)
                    if save and finding.fails_at:
                        final = oracle.check(finding.minimized, (w,))
                        finding.saved = save_case(
                            finding.minimized,
                            {
                                "seed": f"{seed} (query {i})",
                                "schema": oracle.schema.name,
                                "workers": str(w),
                                "kind": out.kind,
                                "differs": final.detail or out.detail,
                                "fails-at": ",".join(map(str, finding.fails_at)),
                                "xfail": "open bug found by the fuzzer, reported to the lead",
                                "original": sql,
                            },
                            cases,
                        )
                        if log:
                            log(f"  saved {finding.saved}")
            if log and (i - start + 1) % 100 == 0:
                c = stats.counts
                log(
                    f"{i - start + 1} queries, {time.perf_counter() - t0:.0f} s: passed {c['passed']} refused "
                    f"{c['refused']} rejected {c['rejected']} wrong {c['wrong']} error {c['error']} "
                    f"internal {c['internal']}"
                )
    except KeyboardInterrupt:
        if log:
            log(f"interrupted after {stats.generated} queries")
    stats.seconds = time.perf_counter() - t0
    return stats
