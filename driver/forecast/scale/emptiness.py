"""Which ranks of a stage output rows, and which (sender, receiver) pieces of its exchange carry rows.

The s3-v2 exchange writes no empty piece and reads no empty range, so its data GETs count the *non-empty*
pairs, not every pair: a final aggregate's gather reads only from ranks that had rows (Q1 at SF0.1 on 8
ranks: lineitem's 6 row groups leave 2 ranks without input), 4 groups hashed over 8 ranks reach at most 4
receivers, a join whose probe side a rank did not scan outputs nothing there.

Per rank, a stage's output is non-empty with probability ``alive[r]`` (0 or 1 when the inputs are known):

- a global aggregate (aggregate functions, no GROUP BY) outputs one row on every rank, input or not;
- an inner join needs every input non-empty on that rank; any other stage (scans, filters, grouped
  aggregates, sorts, outer/anti joins) needs some input non-empty;
- a scan input is non-empty on ranks with splits; an exchange input on the receivers that get rows
  (:func:`deliver`).

A hash exchange's pairs: sender s holds ``k_s`` distinct keys (its rows: an aggregate's rows are distinct
keys; join sides have at least that many rows), all K keys of the stage hash over R receivers. A receiver
gets rows with probability ``m = 1 - (1 - 1/R)^K`` (:func:`hit_rate`; measured: 0 or 1 from the run's
rows per receiver), a sender reaches ``R·(1 - (1 - 1/R)^k_s)`` receivers among them. K is the largest
``k_s`` for aggregates (every rank's partial aggregate holds the same few groups: Q1's 4) and the total
rows otherwise. The simulator and the request formulas take ``sender_hit[s] = alive[s]·min(1, hit(k_s)
/ mean m)`` and ``receiver_hit[q] = m[q]`` (:class:`squall.driver.forecast.scale.requests.PairWeights`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

_AGG = re.compile(r"\b(SUM|COUNT|MIN|MAX|AVG|STDDEV\w*|VAR\w*|BOOL_AND|BOOL_OR|ANY_VALUE|FIRST|LAST)\s*\(")


def output_rule(sql: str) -> str:
    """``"every"`` (a global aggregate: a row on every rank), ``"all"`` (an inner join: every input
    non-empty) or ``"any"`` (some input non-empty) for a stage's SQL."""
    text = " ".join(sql.upper().split())
    if _AGG.search(text) and "GROUP BY" not in text and " OVER " not in text and " OVER(" not in text:
        return "every"
    if re.search(r"\bJOIN\b", text) and not re.search(r"\b(LEFT|RIGHT|FULL|ANTI)\b", text):
        return "all"
    return "any"


def hit_rate(keys: float | np.ndarray, receivers: int) -> np.ndarray:
    """Probability that one of ``receivers`` gets at least one of ``keys`` distinct keys hashed uniformly:
    ``1 - (1 - 1/R)^keys`` (the expected receivers with rows are R times that)."""
    k = np.maximum(np.asarray(keys, dtype=float), 0.0)
    if receivers <= 1:
        return np.where(k > 0, 1.0, 0.0)
    return 1.0 - np.power(1.0 - 1.0 / receivers, k)


def stage_output(
    rule: str,
    ranks: Sequence[int],
    inputs: Sequence[tuple[np.ndarray, np.ndarray]],
    rows_out: float,
    world: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per rank (arrays of length ``world``): expected output rows and probability of any output.

    ``inputs``: per input, (rows per rank, probability non-empty per rank).
    """
    idx = np.asarray(list(ranks), dtype=np.int64)
    alive = np.zeros(world)
    rows_in = np.zeros(world)
    for rows, _a in inputs:
        rows_in += rows
    if rule == "every" or not inputs:
        alive[idx] = 1.0
    elif rule == "all":
        alive[idx] = np.prod([a[idx] for _r, a in inputs], axis=0)
    else:
        alive[idx] = 1.0 - np.prod([1.0 - a[idx] for _r, a in inputs], axis=0)
    weight = np.zeros(world)
    weight[idx] = alive[idx] * (rows_in[idx] if rule != "every" else 1.0)
    if weight.sum() <= 0:
        weight[idx] = alive[idx]
    total = float(weight.sum())
    out = weight * (rows_out / total) if total > 0 else np.zeros(world)
    return out, alive


def hash_pairs(
    rows: np.ndarray,
    alive: np.ndarray,
    senders: Sequence[int],
    receivers: Sequence[int],
    aggregate: bool,
    measured: Sequence[float] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """``(sender_hit, receiver_hit)`` per rank of a hash exchange (module doc). ``measured``: rows per
    receiver of a real run (aligned with sorted ``receivers``), which fixes ``receiver_hit`` to 0/1."""
    world = len(rows)
    recv = sorted(set(receivers))
    n_r = max(1, len(recv))
    s_idx = np.asarray(sorted(set(senders)), dtype=np.int64)
    keys = np.zeros(world)
    ok = alive > 0
    keys[ok] = rows[ok] / alive[ok]
    m = np.zeros(world)
    if len(measured) == len(recv) and recv:
        m[recv] = (np.asarray(measured, dtype=float) > 0).astype(float)
    else:
        k_total = float(keys[s_idx].max()) if aggregate and len(s_idx) else float(rows[s_idx].sum())
        m[recv] = hit_rate(k_total, n_r)
    mean_m = float(m[recv].mean()) if recv else 0.0
    x = np.zeros(world)
    if mean_m > 0:
        x[s_idx] = alive[s_idx] * np.minimum(1.0, hit_rate(keys[s_idx], n_r) / mean_m)
    return x, m


def deliver(
    kind: str,
    rows_out: float,
    sender_alive: np.ndarray,
    receivers: Sequence[int],
    receiver_hit: np.ndarray | None = None,
    measured: Sequence[float] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """What an exchange hands each receiver: (rows per rank, probability non-empty per rank)."""
    world = len(sender_alive)
    rows, alive = np.zeros(world), np.zeros(world)
    recv = sorted(set(receivers))
    if not recv:
        return rows, alive
    if kind == "hash":
        if len(measured) == len(recv):
            rows[recv] = np.asarray(measured, dtype=float)
            alive[recv] = (rows[recv] > 0).astype(float)
            return rows, alive
        m = receiver_hit[recv] if receiver_hit is not None else np.ones(len(recv))
        total = float(m.sum())
        rows[recv] = rows_out * m / total if total > 0 else rows_out / len(recv)
        alive[recv] = m
        return rows, alive
    # broadcast: everything to every receiver; gather: everything to the one receiver
    rows[recv] = rows_out
    alive[recv] = 1.0 - float(np.prod(1.0 - sender_alive))
    return rows, alive
