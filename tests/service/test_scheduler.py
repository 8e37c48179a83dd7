"""The service's scheduler, settings and limits as units: resource groups, per-user limits, weights, the fast
lane, queue position and estimated wait (on a fake clock), and what ``[service]`` / the flags accept."""

from __future__ import annotations

import pyarrow as pa
import pytest

import squall
from squall.errors import LimitExceeded, OptionError
from squall.service.runner import Limits
from squall.service.scheduler import (
    ANONYMOUS,
    GroupSpec,
    QueueFull,
    Scheduler,
    SchedulerConfig,
    planned_scan_bytes,
)
from squall.service.settings import ServiceSettings, parse_duration, parse_size

SMALL, BIG = 100, 10_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(config: SchedulerConfig) -> tuple[Scheduler, list[str], Clock]:
    started: list[str] = []
    clock = Clock()
    return Scheduler(config, lambda t: started.append(t.query_id), clock), started, clock


def lanes(max_running: int = 4, long_running: int = 2, max_queued: int = 10, **user: int) -> SchedulerConfig:
    return ServiceSettings(
        max_running=max_running,
        long_running=long_running,
        max_queued=max_queued,
        fast_lane_bytes=1000,
        **user,
    ).scheduler_config()


def test_the_fast_lane_takes_small_queries_and_never_waits_behind_long_ones():
    sched, started, _ = make(lanes())
    for q in ("long1", "long2", "long3"):
        sched.submit(q, scan_bytes=BIG)
    assert started == ["long1", "long2"]  # the default group runs long_running = 2
    sched.submit("short", scan_bytes=SMALL)
    assert started == ["long1", "long2", "short"]  # ahead of long3, which still waits
    assert sched.queue_info("long3")["group"] == "default"
    sched.finish("long1")
    assert started[-1] == "long3"
    assert (
        sched.group_for(ANONYMOUS, 1000).name == "fast" and sched.group_for(ANONYMOUS, 1001).name == "default"
    )


def test_all_groups_together_run_at_most_max_running():
    sched, started, _ = make(lanes(max_running=3, long_running=2))
    for q in ("l1", "l2", "s1", "s2"):
        sched.submit(q, scan_bytes=BIG if q[0] == "l" else SMALL)
    assert started == ["l1", "l2", "s1"]
    assert sched.queue_info("s2") is not None
    sched.finish("l1")
    assert started[-1] == "s2"
    assert sched.snapshot()["running"] == 3


def test_per_user_running_limit_lets_other_users_go_ahead():
    sched, started, _ = make(lanes(long_running=4, user_running=1))
    sched.submit("a1", user="ann", scan_bytes=BIG)
    sched.submit("a2", user="ann", scan_bytes=BIG)
    sched.submit("b1", user="bob", scan_bytes=BIG)
    assert started == ["a1", "b1"]  # a2 waits for ann's first, bob's goes ahead of it
    sched.finish("b1")
    assert started == ["a1", "b1"]
    sched.finish("a1")
    assert started == ["a1", "b1", "a2"]


def test_queue_limits_refuse_with_retry_after():
    sched, started, _ = make(lanes(long_running=1, max_queued=2, user_queued=1))
    sched.submit("run", user="ann", scan_bytes=BIG)
    sched.submit("q1", user="ann", scan_bytes=BIG)
    with pytest.raises(
        QueueFull, match=r"user 'ann' has 1 queries waiting in resource group 'default'"
    ) as user:
        sched.submit("q2", user="ann", scan_bytes=BIG)
    assert user.value.status == 429 and user.value.retry_after_s >= 1
    sched.submit("q3", user="bob", scan_bytes=BIG)
    with pytest.raises(QueueFull, match=r"2 queries are waiting on this server \(at most 2\); retry later"):
        sched.submit("q4", user="cat", scan_bytes=BIG)
    assert sched.queue_info("q2") is None and sched.queue_info("q4") is None  # refused: not kept
    assert started == ["run"]


def test_a_query_that_starts_at_once_is_never_refused_for_a_full_queue():
    sched, started, _ = make(lanes(long_running=1, max_queued=0))
    sched.submit("a", scan_bytes=BIG)
    sched.submit("b", scan_bytes=SMALL)
    with pytest.raises(QueueFull):
        sched.submit("c", scan_bytes=BIG)
    assert started == ["a", "b"]


def test_weights_share_the_places_when_max_running_binds():
    heavy = GroupSpec("heavy", max_running=10, max_queued=100, weight=3, users=("h",))
    light = GroupSpec("light", max_running=10, max_queued=100, weight=1, users=("l",))
    filler = GroupSpec("filler", max_running=4, max_queued=0, users=("f",))
    sched, started, _ = make(SchedulerConfig(4, 100, (heavy, light, filler, GroupSpec("rest", 1, 0))))
    for i in range(4):
        sched.submit(f"f{i}", user="f")  # all four places taken: the others queue
    for i in range(8):
        sched.submit(f"h{i}", user="h")
        sched.submit(f"l{i}", user="l")
    for i in range(4):  # each end starts the next one from the group furthest below its share
        sched.finish(f"f{i}")
    assert started[4:] == ["h0", "l0", "h1", "h2"]  # 3 : 1
    sched.finish("l0")
    sched.finish("h0")
    assert started[8:] == ["l1", "h3"]


def test_position_ahead_and_estimated_wait():
    sched, _started, clock = make(lanes(max_running=4, long_running=2))
    for q in ("a", "b"):
        sched.submit(q, scan_bytes=BIG)
    clock.now += 10
    sched.finish("a")  # the group's mean run time is now 10 s
    sched.submit("c", scan_bytes=BIG)  # starts in a's place at t=10
    sched.submit("d", scan_bytes=BIG)
    sched.submit("e", scan_bytes=BIG)
    sched.submit("f", scan_bytes=BIG)
    clock.now += 4
    # b started at 0 (mean 10: frees in 0 s), c at 10 (frees in 6 s); d takes b's place, e c's, f d's
    assert sched.queue_info("d") == {"position": 1, "ahead": 0, "estimated_wait_s": 0.0, "group": "default"}
    assert sched.queue_info("e") == {"position": 2, "ahead": 1, "estimated_wait_s": 6.0, "group": "default"}
    assert sched.queue_info("f") == {"position": 3, "ahead": 2, "estimated_wait_s": 10.0, "group": "default"}
    assert sched.queue_info("b") is None  # running
    assert sched.cancel("e") and not sched.cancel("b") and not sched.cancel("unknown")
    assert sched.queue_info("f")["position"] == 2 and sched.queue_info("f")["ahead"] == 1
    sched.finish("unknown")  # harmless


def test_a_query_whose_timeout_passes_in_the_queue_starts_at_once():
    sched, started, clock = make(lanes(long_running=1))
    sched.submit("long", scan_bytes=BIG)
    sched.submit("patient", scan_bytes=BIG)
    sched.submit("hasty", scan_bytes=BIG, timeout_s=2)
    clock.now += 3
    sched.poll()
    assert started == ["long", "hasty"]  # only to be failed by the runner, without running
    sched.finish("hasty")
    assert sched.snapshot()["groups"]["default"]["mean_run_s"] == 3.0  # not counted: it did not run


def test_planned_scan_bytes_counts_the_plans_splits(sf001):
    with squall.Connection(str(sf001), workers=2) as con:
        nation = planned_scan_bytes(con.plan("SELECT count(*) FROM nation"))
        one = planned_scan_bytes(con.plan("SELECT sum(l_quantity) FROM lineitem"))
        two = planned_scan_bytes(con.plan("SELECT sum(l_quantity), sum(l_extendedprice) FROM lineitem"))
    assert 0 < nation < one < two


def test_settings_from_the_config_table_and_flags():
    settings = ServiceSettings.load(
        {"max_running": 5, "fast_lane_bytes": "2MiB", "max_run_time": "10m", "max_result_rows": "off",
         "groups": {"etl": {"max_running": 1, "users": ["etl"], "weight": 2}}},
        {"max_running": 6, "max_scan_bytes": "1GB", "max_queued": None},
    )  # fmt: skip
    assert settings.max_running == 6 and settings.fast_lane_bytes == 2 * 1024**2
    assert settings.max_run_time == 600 and settings.max_result_rows is None
    assert settings.limits() == Limits(None, 256 * 1024**2, 10**9, 600.0)
    groups = settings.scheduler_config().groups
    assert [g.name for g in groups] == ["etl", "fast", "default"] and groups[0].weight == 2
    assert settings.pool_size(2, 16) == 12 and ServiceSettings.defaults(cores=4).pool_size(4, 32) == 32
    defaults = ServiceSettings.defaults(cores=2)
    assert (defaults.max_running, defaults.long_running, defaults.warm(2, 8)) == (4, 2, 6)


@pytest.mark.parametrize(
    ("table", "flags", "message"),
    [
        ({"max_runing": 1}, {}, "squall.toml [service]: unknown setting 'max_runing' (settings: "),
        ({"max_running": "x"}, {}, "squall.toml [service]: max_running must be a whole number, got 'x'"),
        ({}, {"max_running": 0}, "--max-running must be at least 1, got 0"),
        ({}, {"fast_lane_bytes": "12Q"}, "--fast-lane-bytes must be a size such as 16MB or 2GiB, got '12Q'"),
        (
            {},
            {"max_run_time": "soon"},
            "--max-run-time must be a duration such as 90s, 30m or 2h, got 'soon'",
        ),
        ({"groups": {"g": {"weight": 1}}}, {}, "squall.toml [service]: group g needs max_running"),
        (
            {"groups": {"g": {"max_running": 1, "who": 1}}},
            {},
            "squall.toml [service]: group g: unknown key 'who'",
        ),
    ],
)
def test_bad_settings_are_one_line_errors(table, flags, message):
    with pytest.raises(OptionError) as err:
        ServiceSettings.load(table, flags)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_sizes_and_durations():
    assert parse_size("16MB", "x") == 16_000_000 and parse_size("1.5GiB", "x") == int(1.5 * 1024**3)
    assert parse_size(42, "x") == 42
    assert (
        parse_duration("90s", "x") == 90 and parse_duration("2h", "x") == 7200 and parse_duration(5, "x") == 5
    )


def test_limits_refuse_in_one_line():
    limits = Limits(max_result_rows=10, max_result_bytes=1000, max_scan_bytes=2048)
    limits.check_scan(2048)
    with pytest.raises(
        LimitExceeded, match=r"^the query would read 3.0 KiB, more than this server lets one query"
    ):
        limits.check_scan(3072)
    limits.check_result(pa.table({"a": list(range(10))}))
    with pytest.raises(LimitExceeded, match=r"^the result has 11 rows, more than this server returns \(10\): "
                                            r"write it with COPY \(query\) TO 'target' or squall query --output"):  # fmt: skip
        limits.check_result(pa.table({"a": list(range(11))}))
    with pytest.raises(LimitExceeded, match=r"^the result has 7.7 KiB, more than this server returns"):
        limits.check_result(pa.table({"a": pa.array([0] * 10, pa.int64()), "b": ["x" * 780] * 10}))
    Limits().check_result(pa.table({"a": list(range(100))}))  # no limits
