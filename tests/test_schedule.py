"""Neo-Join's communication schedule (exchange/schedule.py): every phase a matching, every byte once,
the busiest link's time exactly (Gonzalez-Sahni), and fewer phases with a quantum."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.exchange.schedule import bound, open_shop, round_robin_length


def _check(matrix, quantum=1):
    schedule = open_shop(matrix, quantum)
    n = len(matrix)
    done: dict[tuple[int, int], int] = {}
    for phase in schedule.phases:
        assert phase, "an empty phase"
        assert len({t.sender for t in phase}) == len(phase), "a sender writes to two receivers at once"
        assert len({t.receiver for t in phase}) == len(phase), "a receiver hears from two senders at once"
        for t in phase:
            assert t.sender != t.receiver and t.length > 0
            assert t.offset == done.get((t.sender, t.receiver), 0), "chunks of a pair in stream order"
            done[(t.sender, t.receiver)] = t.offset + t.length
    for s in range(n):
        for r in range(n):
            assert done.get((s, r), 0) == (0 if s == r else matrix[s][r])
    assert schedule.bound == bound(matrix)
    return schedule


matrices = st.integers(1, 6).flatmap(
    lambda n: st.lists(
        st.lists(st.one_of(st.just(0), st.integers(1, 50), st.integers(1, 10**6)), min_size=n, max_size=n),
        min_size=n,
        max_size=n,
    )
)


@settings(max_examples=200, deadline=None)
@given(matrices)
def test_open_shop_is_optimal(matrix):
    schedule = _check(matrix)
    assert schedule.length == schedule.bound  # no schedule can be shorter than the busiest link
    assert round_robin_length(matrix) >= schedule.length


@settings(max_examples=100, deadline=None)
@given(matrices, st.sampled_from([7, 1000, 1 << 18]))
def test_a_quantum_costs_at_most_one_per_pair_on_the_busiest_link(matrix, quantum):
    schedule = _check(matrix, quantum)
    n = len(matrix)
    assert schedule.bound <= schedule.length <= schedule.bound + n * quantum
    for phase in schedule.phases:  # only a pair's last chunk may be shorter than the quantum
        for t in phase:
            assert t.length % quantum == 0 or t.offset + t.length == matrix[t.sender][t.receiver]


def test_skewed_exchange_beats_round_robin():
    # two heavy pairs that round-robin puts in different phases: each phase waits for its largest transfer
    matrix = [[0, 100, 1, 1], [1, 0, 1, 100], [1, 1, 0, 1], [1, 1, 1, 0]]
    schedule = _check(matrix)
    assert schedule.length == schedule.bound == 102  # rank 1 sends (and rank 3 receives) 102
    assert round_robin_length(matrix) == 100 + 100 + 1
    first = schedule.phases[0]
    assert {(t.sender, t.receiver) for t in first} >= {(0, 1), (1, 3)}  # both heavy pairs at once


def test_a_quantum_means_fewer_phases():
    matrix = [
        [0 if s == r else ((s * 131 + r * 71) % 97) * 100_003 + 7 * s + r for r in range(8)] for s in range(8)
    ]
    exact, coarse = _check(matrix), _check(matrix, 1 << 18)
    assert len(coarse.phases) < len(exact.phases) / 2
    assert coarse.length <= 1.05 * coarse.bound


def test_empty_and_local_only():
    assert open_shop([]).phases == ()
    assert open_shop([[5]]).phases == ()  # a rank's own data never crosses a link
    assert open_shop([[0, 0], [0, 0]]).length == 0


def test_bad_matrices_are_rejected():
    with pytest.raises(ValueError, match="row 1 has 1 entries, expected 2"):
        open_shop([[0, 1], [2]])
    with pytest.raises(ValueError, match=r"entry \[0\]\[1\] is -3"):
        open_shop([[0, -3], [1, 0]])
    with pytest.raises(ValueError, match="quantum is 0"):
        open_shop([[0, 1], [1, 0]], 0)


def test_benchmark_model(capsys):
    """benchmarks/fabric_schedule.py's model: open-shop at the bound, round-robin and all-at-once beside it."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "fabric_schedule.py"
    spec = importlib.util.spec_from_file_location("squall_benchmark_fabric_schedule", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--model-only", "--worlds", "4", "--model-mib", "64"]) == 0  # quanta << the matrix
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  4 ")]
    assert len(rows) == 4  # uniform, hot receiver, zipf 1.0, zipf 1.5
    for row in rows:  # finish times relative to the bound: open-shop, round-robin, all at once
        assert float(row[-8]) <= 1.01 and float(row[-5]) >= 1.0 and float(row[-3]) >= 0.999, row
    assert module.fair_share_length([[0, 2], [2, 0]]) == 2.0  # each link carries 2 at rate 1
