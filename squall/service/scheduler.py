"""Admission of ``squall serve``'s queries: resource groups after Trino, a fast lane, queue positions.

Every submitted query goes to one **resource group**, the first whose selector takes it (the groups of
``[service.groups.NAME]`` in ``squall.toml`` first, in order, then the two built-in ones):

- ``fast`` takes the queries whose plan reads at most ``fast_lane_bytes`` (:func:`planned_scan_bytes`: the
  compressed bytes of the column chunks of the plan's scan splits) — the fast lane: short queries never wait
  behind long ones, because those run in a group of their own;
- ``default`` takes the rest; it runs at most ``long_running`` at once.

A group has a limit of running and of queued queries, both also per user (``user_running``, ``user_queued``;
the user is the request's, ``"anonymous"`` without users), and a scheduling **weight**. A user of the users
file may have limits of their own over every group (``max_running``, ``max_queued``: a submission beyond them
is a 429 naming them). All groups together run at
most ``max_running`` queries and queue at most ``max_queued``. When a query finishes, the next one starts from
the group with the least running queries for its weight (Trino's ``weighted_fair``) among those with a query
that may start; within a group first come, first served, skipping users at their limit. A submission beyond a
queue limit is refused (:class:`QueueFull`, HTTP 429 with ``Retry-After``); a query that can start at once is
never counted as queued.

:meth:`Scheduler.queue_info` tells a queued query where it stands: ``{"position", "ahead", "estimated_wait_s",
"group"}`` — ``position`` 1, 2, … among all queued queries in submission order, ``ahead`` the queries of its
group that start before it, and the wait estimated from the mean run time of the group's last
:data:`HISTORY` queries (the running ones' elapsed time until one has finished).

The scheduler only decides; :class:`~squall.service.backend.LocalBackend` runs what it starts (``start``
callback) and reports each end (:meth:`Scheduler.finish`).
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from squall.errors import OptionError
from squall.plan import Plan
from squall.service.errors import Busy

ANONYMOUS = "anonymous"
FAST, DEFAULT = "fast", "default"
#: run times kept per group for the wait estimate
HISTORY = 20
#: the run time assumed before a group has any (seconds)
FIRST_GUESS_S = 1.0


def planned_scan_bytes(plan: Plan) -> int:
    """The bytes a plan reads: the compressed column chunks of its scan splits, a replicated scan (every rank
    reads it) counted once per rank. Text tables (CSV, JSON) and S3 Select scans count 0: their splits carry no
    size."""
    total = 0
    for stage in plan.stages:
        for scan in stage.inputs:
            splits = getattr(scan, "splits", None)
            if not splits:
                continue
            size = sum(split.nbytes for rank in splits for split in rank)
            total += size * plan.world_size if getattr(scan, "replicated", False) else size
    return total


@dataclass(frozen=True)
class GroupSpec:
    """A resource group: its limits, its weight, and which queries it takes (``max_scan_bytes``: those that
    read at most this; ``users``: those of these users; neither: every query)."""

    name: str
    max_running: int
    max_queued: int
    weight: int = 1
    user_running: int | None = None
    user_queued: int | None = None
    max_scan_bytes: int | None = None
    users: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key in ("max_running", "weight"):
            if int(getattr(self, key)) < 1:
                raise OptionError(f"resource group {self.name}: {key} must be at least 1")
        for key in ("max_queued", "user_queued", "max_scan_bytes"):
            value = getattr(self, key)
            if value is not None and int(value) < 0:
                raise OptionError(f"resource group {self.name}: {key} must be at least 0")
        if self.user_running is not None and self.user_running < 1:
            raise OptionError(f"resource group {self.name}: user_running must be at least 1")

    def takes(self, user: str, scan_bytes: int) -> bool:
        if self.users and user not in self.users:
            return False
        return self.max_scan_bytes is None or scan_bytes <= self.max_scan_bytes


@dataclass(frozen=True)
class SchedulerConfig:
    """All groups together run at most ``max_running`` queries and queue at most ``max_queued``; ``groups`` in
    the order their selectors are tried (the last should take every query)."""

    max_running: int
    max_queued: int
    groups: tuple[GroupSpec, ...]

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise OptionError(f"max_running must be at least 1, got {self.max_running}")
        if self.max_queued < 0:
            raise OptionError(f"max_queued must be at least 0, got {self.max_queued}")
        names = [g.name for g in self.groups]
        if not names or len(set(names)) != len(names):
            raise OptionError(f"resource groups need distinct names, got {names}")


@dataclass(eq=False)
class Ticket:
    """One query in the scheduler: queued until ``started`` is set."""

    query_id: str
    user: str
    group: str
    scan_bytes: int
    submitted: float
    deadline: float | None = None  # (clock) the query's timeout ends; it then starts at once, only to fail
    started: float | None = None
    expired: bool = False
    #: queries running or waiting (this one among them) when it started: how busy the server was
    load: int = 1
    #: the user's own limits over every group (the users file's max_running, max_queued; None: none)
    user_running: int | None = None
    user_queued: int | None = None


class QueueFull(Busy):
    """A queue limit is reached (429); ``retry_after_s``: when trying again makes sense (``Retry-After``)."""

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


@dataclass
class _Group:
    spec: GroupSpec
    queued: list[Ticket] = field(default_factory=list)
    running: dict[str, Ticket] = field(default_factory=dict)
    history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def users_running(self, user: str) -> int:
        return sum(1 for t in self.running.values() if t.user == user)

    def next_ticket(self, may_start: Callable[[Ticket], bool]) -> Ticket | None:
        """The first queued ticket whose user is under the group's per-user limit (and ``may_start``: under
        the user's own)."""
        limit = self.spec.user_running
        for ticket in self.queued:
            if (limit is None or self.users_running(ticket.user) < limit) and may_start(ticket):
                return ticket
        return None


class Scheduler:
    """Decides which queries run (see the module doc). ``start(ticket)`` is called, outside the scheduler's
    lock, for every query it admits; the caller runs it and calls :meth:`finish` when it ends."""

    def __init__(
        self,
        config: SchedulerConfig,
        start: Callable[[Ticket], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._start = start
        self._clock = clock
        self._groups = {spec.name: _Group(spec) for spec in config.groups}
        self._lock = threading.Lock()
        self._tickets: dict[str, Ticket] = {}
        self._order = 0

    def group_for(self, user: str, scan_bytes: int) -> GroupSpec:
        """The group that takes a query of ``user`` reading ``scan_bytes``."""
        for group in self._groups.values():
            if group.spec.takes(user, scan_bytes):
                return group.spec
        raise OptionError(f"no resource group takes a query of user {user!r} reading {scan_bytes} bytes")

    def submit(
        self,
        query_id: str,
        *,
        user: str = ANONYMOUS,
        scan_bytes: int = 0,
        timeout_s: float | None = None,
        user_limits: tuple[int | None, int | None] = (None, None),
    ) -> Ticket:
        """Queue the query (it may start at once, through ``start``); QueueFull when a queue limit is reached.
        ``timeout_s``: the query's timeout from now; when it passes in the queue the query starts at once (the
        runner then fails it without running it). ``user_limits``: the user's own (max running, max queued)
        over every group (the users file)."""
        spec = self.group_for(user, scan_bytes)
        now = self._clock()
        ticket = Ticket(
            query_id, user, spec.name, int(scan_bytes), now, now + timeout_s if timeout_s else None,
            user_running=user_limits[0], user_queued=user_limits[1],
        )  # fmt: skip
        with self._lock:
            if query_id in self._tickets:
                return self._tickets[query_id]
            group = self._groups[spec.name]
            group.queued.append(ticket)
            self._tickets[query_id] = ticket
            admitted = self._admit()
            refused = None if ticket.started is not None else self._refusal(group, ticket)
            if refused is not None:
                group.queued.remove(ticket)
                del self._tickets[query_id]
        self._run(admitted)
        if refused is not None:
            raise refused
        return ticket

    def finish(self, query_id: str) -> None:
        """The query ended (however): its place is free, the next ones start."""
        with self._lock:
            ticket = self._tickets.pop(query_id, None)
            if ticket is not None and ticket.started is not None:
                group = self._groups[ticket.group]
                group.running.pop(query_id, None)
                if not ticket.expired:
                    group.history.append(self._clock() - ticket.started)
            admitted = self._admit()
        self._run(admitted)

    def cancel(self, query_id: str) -> bool:
        """Take a queued query out of the queue (True); False when it runs already or is unknown."""
        with self._lock:
            ticket = self._tickets.get(query_id)
            if ticket is None or ticket.started is not None:
                return False
            self._groups[ticket.group].queued.remove(ticket)
            del self._tickets[query_id]
            return True

    def poll(self) -> None:
        """Start the queries whose timeout passed in the queue (called now and then by the backend)."""
        with self._lock:
            admitted = self._admit()
        self._run(admitted)

    def _run(self, admitted: Iterable[Ticket]) -> None:
        for ticket in admitted:
            self._start(ticket)

    # --- decisions (under the lock) -------------------------------------------------------------------

    def _running(self) -> int:
        return sum(len(g.running) for g in self._groups.values())

    def _queued(self) -> int:
        return sum(len(g.queued) for g in self._groups.values())

    def _admit(self) -> list[Ticket]:
        """The tickets that start now: the expired ones, then by weighted fairness while there is room."""
        now = self._clock()
        started: list[Ticket] = []
        for group in self._groups.values():
            for ticket in [t for t in group.queued if t.deadline is not None and now >= t.deadline]:
                ticket.expired = True
                started.append(self._start_ticket(group, ticket, now))
        while self._running() < self.config.max_running:
            candidates = []
            for group in self._groups.values():
                if len(group.running) >= group.spec.max_running:
                    continue
                head = group.next_ticket(self._user_may_start)
                if head is not None:
                    candidates.append((len(group.running) / group.spec.weight, head.submitted, group, head))
            if not candidates:
                break
            _share, _when, group, ticket = min(candidates, key=lambda c: (c[0], c[1]))
            started.append(self._start_ticket(group, ticket, now))
        return started

    def _user_may_start(self, ticket: Ticket) -> bool:
        """Whether the ticket's user runs fewer queries than their own ``max_running`` (over every group)."""
        if ticket.user_running is None:
            return True
        running = sum(1 for g in self._groups.values() for t in g.running.values() if t.user == ticket.user)
        return running < ticket.user_running

    def _start_ticket(self, group: _Group, ticket: Ticket, now: float) -> Ticket:
        group.queued.remove(ticket)
        group.running[ticket.query_id] = ticket
        ticket.started = now
        ticket.load = self._running() + self._queued()
        return ticket

    def _refusal(self, group: _Group, ticket: Ticket) -> QueueFull | None:
        """Why ``ticket`` (queued, not started) may not wait, or None."""
        spec = group.spec
        waiting = self._queued() - 1
        if waiting >= self.config.max_queued:
            reason = f"{waiting} queries are waiting on this server (at most {self.config.max_queued})"
        elif len(group.queued) - 1 >= spec.max_queued:
            reason = f"{spec.max_queued} queries are waiting in resource group {spec.name!r}"
        elif spec.user_queued is not None and self._user_queued(group, ticket.user) - 1 >= spec.user_queued:
            reason = (
                f"user {ticket.user!r} has {spec.user_queued} queries waiting in resource group {spec.name!r}"
            )
        elif ticket.user_queued is not None and self._user_queued_all(ticket.user) - 1 >= ticket.user_queued:
            running = sum(
                1 for g in self._groups.values() for t in g.running.values() if t.user == ticket.user
            )
            reason = (
                f"user {ticket.user} has {ticket.user_queued} queries waiting (max_queued {ticket.user_queued}) "
                f"and {running} running (max_running {ticket.user_running if ticket.user_running else 'none'})"
            )
        else:
            return None
        wait = self._wait_before(group, len(group.queued) - 1)
        return QueueFull(f"{reason}; retry later", max(1, math.ceil(wait)))

    def _user_queued(self, group: _Group, user: str) -> int:
        return sum(1 for t in group.queued if t.user == user)

    def _user_queued_all(self, user: str) -> int:
        return sum(self._user_queued(g, user) for g in self._groups.values())

    # --- where a queued query stands ----------------------------------------------------------------

    def queue_info(self, query_id: str) -> dict[str, Any] | None:
        """``{"position", "ahead", "estimated_wait_s", "group"}`` of a queued query; None when it is not queued."""
        with self._lock:
            ticket = self._tickets.get(query_id)
            if ticket is None or ticket.started is not None:
                return None
            group = self._groups[ticket.group]
            queued = sorted((t for g in self._groups.values() for t in g.queued), key=lambda t: t.submitted)
            ahead = group.queued.index(ticket)
            return {
                "position": queued.index(ticket) + 1,
                "ahead": ahead,
                "estimated_wait_s": round(self._wait_before(group, ahead), 1),
                "group": group.spec.name,
            }

    def snapshot(self) -> dict[str, Any]:
        """Running and queued queries per group: ``{"running": n, "queued": n, "groups": {name: {...}}}``."""
        with self._lock:
            groups = {name: self._group_doc(g) for name, g in self._groups.items()}
            return {"running": self._running(), "queued": self._queued(), "groups": groups}

    def _group_doc(self, group: _Group) -> dict[str, Any]:
        spec = group.spec
        return {"running": len(group.running), "queued": len(group.queued), "max_running": spec.max_running,
                "max_queued": spec.max_queued, "mean_run_s": round(self._mean_run(group), 3)}  # fmt: skip

    def _mean_run(self, group: _Group) -> float:
        """The group's mean run time; before any finished, the longest elapsed time of its running queries."""
        if group.history:
            return sum(group.history) / len(group.history)
        now = self._clock()
        elapsed = [now - t.started for t in group.running.values() if t.started is not None]
        return max([FIRST_GUESS_S, *elapsed])

    def _wait_before(self, group: _Group, ahead: int) -> float:
        """Seconds until the query with ``ahead`` queries before it in ``group`` may start: the group's places
        free as its running queries reach the mean run time, then each query ahead takes one for that long."""
        mean = self._mean_run(group)
        now = self._clock()
        frees = [max(0.0, mean - (now - t.started)) for t in group.running.values() if t.started is not None]
        frees += [0.0] * max(0, group.spec.max_running - len(frees))
        heapq.heapify(frees)
        for _ in range(ahead):
            heapq.heappush(frees, heapq.heappop(frees) + mean)
        return frees[0]
