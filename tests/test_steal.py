"""The stealing scan (operators/steal.py) over a real local exchange: retried ranks, W=1, plans.

The platform runs are in tests/platforms/test_work_stealing.py; these drive :func:`steal_scan`
rank by rank in one process to reach states a run rarely shows (a rank that died after claiming).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from squall.exchange.base import open_exchange
from squall.exchange.local import LocalExchangeFactory
from squall.operators.steal import item_id, steal_scan
from squall.plan import Output, Plan, ScanInput, Split, Stage

QUERY = "qsteal"


def _scan(queues: list[int]) -> ScanInput:
    """A scan whose rank r has ``queues[r]`` splits; split rows name (owner, index)."""
    splits = tuple(
        tuple(Split(f"/data/t{r}.parquet", (i,), ((i * 10, i * 10 + 10),), rows=10) for i in range(n))
        for r, n in enumerate(queues)
    )
    return ScanInput("s1_t", "t", "/data", (("a", "a"),), splits, steal=True)


def _reader(log: list[str], fail_after: int | None = None):
    def read(split: Split) -> pa.Table:
        if fail_after is not None and len(log) >= fail_after:
            raise RuntimeError("worker crashed")
        log.append(f"{split.path}:{split.row_groups[0]}")
        return pa.table({"a": [len(log)]})

    return read


@pytest.fixture
def config(tmp_path):
    factory = LocalExchangeFactory(root=tmp_path)
    cfg = factory.prepare(QUERY, 2)
    yield cfg
    factory.cleanup(cfg)


def test_retried_rank_reads_what_its_first_attempt_claimed(config):
    inp = _scan([1, 4])
    # rank 0, attempt 1: reads its split, steals rank 1's tail (3), claims 2 and dies reading it
    first: list[str] = []
    with pytest.raises(RuntimeError):
        steal_scan(inp, 1, (0, 1), 0, open_exchange(config, 0, 2), QUERY, _reader(first, fail_after=2))
    assert first == ["/data/t0.parquet:0", "/data/t1.parquet:3"]
    # rank 1 runs: its splits 0 and 1 are still free, 2 and 3 are rank 0's
    log1: list[str] = []
    _, rep1 = steal_scan(inp, 1, (0, 1), 1, open_exchange(config, 1, 2), QUERY, _reader(log1))
    assert log1 == ["/data/t1.parquet:0", "/data/t1.parquet:1"]
    assert (rep1.own, rep1.lost, rep1.stolen) == (2, 2, 0)
    # rank 0, attempt 2: its own split again, and both splits its first attempt stole
    log0: list[str] = []
    _, rep0 = steal_scan(inp, 1, (0, 1), 0, open_exchange(config, 0, 2), QUERY, _reader(log0))
    assert sorted(log0) == ["/data/t0.parquet:0", "/data/t1.parquet:2", "/data/t1.parquet:3"]
    assert (rep0.own, rep0.stolen, rep0.reclaimed, rep0.read) == (1, 0, 2, 3)
    assert sorted(log0 + log1) == sorted(
        f"/data/t{r}.parquet:{i}" for r, n in ((0, 1), (1, 4)) for i in range(n)
    )


def test_thief_takes_the_most_loaded_rank_from_the_tail(config):
    inp = _scan([1, 2, 5])
    log: list[str] = []
    _, rep = steal_scan(inp, 1, (0, 1, 2), 0, open_exchange(config, 0, 3), QUERY, _reader(log))
    # alone, rank 0 drains everything: rank 2 first (most rows left) from its tail, until rank 1 has as many
    assert log[:4] == ["/data/t0.parquet:0", "/data/t2.parquet:4", "/data/t2.parquet:3", "/data/t2.parquet:2"]
    assert rep.read == 8 and rep.stolen == 7 and rep.stolen_from == {2: 5, 1: 2}
    ex = open_exchange(config, 0, 3)
    assert ex.claims(QUERY, "s1_t.") == {
        item_id("s1_t", r, i): 0 for r, n in enumerate([1, 2, 5]) for i in range(n)
    }


def test_one_rank_reads_its_queue(config):
    inp = _scan([3])
    log: list[str] = []
    tables, rep = steal_scan(inp, 1, (0,), 0, open_exchange(config, 0, 1), QUERY, _reader(log))
    assert len(tables) == 3 and rep.own == 3 and rep.stolen == 0 and rep.lists == 1


def test_steal_flag_round_trips_and_defaults_off():
    inp = _scan([1, 1])
    stage = Stage(1, (0, 1), (inp,), "SELECT * FROM s1_t", Output("result"))
    d = Plan("select 1", 2, (stage,), ("x",)).to_dict()
    assert Plan.from_dict(d).stages[0].inputs[0] == inp
    del d["stages"][0]["inputs"][0]["steal"]  # a plan written before the field existed
    assert Plan.from_dict(d).stages[0].inputs[0].steal is False
