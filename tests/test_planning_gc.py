"""The collector's threshold while planning (driver/planning_gc.py): raised during planning only, the process's
own setting restored after and never lowered."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import squall
import squall.driver.compile as compile_module
from squall.driver.planning_gc import PLANNING_THRESHOLD, planning_gc


@pytest.fixture(autouse=True)
def process_threshold() -> Iterator[tuple[int, int, int]]:
    own = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield (700, 10, 10)
    gc.set_threshold(*own)


def test_raised_while_planning_and_restored_after():
    with planning_gc():
        assert gc.get_threshold() == (PLANNING_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_plannings_share_the_raise():
    first, second = planning_gc(), planning_gc()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == PLANNING_THRESHOLD  # the second still plans
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_after_an_error():
    with pytest.raises(ValueError), planning_gc():
        raise ValueError("planning failed")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("own", [(0, 10, 10), (50_000, 10, 10)])
def test_a_threshold_of_the_process_that_is_off_or_higher_is_left_alone(own):
    gc.set_threshold(*own)
    with planning_gc():
        assert gc.get_threshold() == own
    assert gc.get_threshold() == own


def test_a_change_made_while_planning_is_kept():
    with planning_gc():
        gc.set_threshold(2_000, 5, 5)
    assert gc.get_threshold() == (2_000, 5, 5)


def test_queries_are_planned_with_it(tmp_path, monkeypatch):
    seen = []
    plan = compile_module._compile

    def watched(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return plan(*args, **kwargs)

    monkeypatch.setattr(compile_module, "_compile", watched)
    with squall.connect(workers=2) as con:
        assert con.sql("SELECT 1 AS x").to_arrow().to_pylist() == [{"x": 1}]
    assert seen == [PLANNING_THRESHOLD] and gc.get_threshold() == (700, 10, 10)
