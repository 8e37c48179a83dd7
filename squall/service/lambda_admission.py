"""Admission of the deployed API's queries: running and queued limits, per user and in all, kept in the state store.

On Lambda every query runs in a driver function of its own, and many API function instances answer requests at
once, none with a background thread: the admission state is objects in the query state store (S3), and every
decision is made with conditional writes, so two instances never start one query twice nor run more queries than
the limits allow. Keys (relative to the store's root, ``s3://$SQUALL_BUCKET/queries/``)::

    _admission/running/<n>             running slot n (0 ≤ n < max_running): {query_id, user}; created only if
                                       absent (``If-None-Match: *``) — holding one is what "running" means
    _admission/users/<ukey>/<k>        the user's slot k (0 ≤ k < user_running), the same way
    _admission/queue/<ms>-<id>-<ukey>  a queued query (``ms``: its submission time): names sort oldest first
    _admission/runs.json               the run times of the last queries (for wait estimates)
    <id>/admission.json                the claim on a queued query: created once by whoever starts it (or refuses
                                       or cancels it); then holds its slots (``slot``, ``user_slot``)

``ukey`` is a hash of the user name. Counting is a listing of a prefix (one request), never a read per query.

- **Submit** (:meth:`Admission.submit`): the query joins the queue, then the queue is promoted (oldest first); if
  the query did not start and a queue limit is exceeded (``max_queued`` queued in all, ``user_queued`` of its user),
  it leaves the queue again and is refused (:class:`~squall.service.scheduler.QueueFull`: 429 with
  ``Retry-After``). A query that can start at once is never counted as queued.
- **Promote** (:meth:`Admission.promote`): for each queued query, oldest first, while a running slot is free:
  claim the query (``<id>/admission.json``, create-only: a query another instance claimed is skipped), take a
  user slot (none free: the user is at ``user_running``, try the next user's query) and a running slot (none:
  stop), remove the queue entry and start the driver (``launch``). A step that fails gives back what was taken.
- **End** (:meth:`Admission.finished`): the driver function, when its query has ended (succeeded, failed or
  cancelled), gives back its slots — a conditional delete (``If-Match`` on the slot's ETag), so only its own —
  and promotes. The API also promotes on every submit and on every status request of a queued query, so a lost
  promotion (a driver that died) heals on the next request.
- **Healing**: when every running slot is taken while queries wait (or every slot of a waiting query's user),
  slots older than :data:`CHECK_AFTER_S` are checked: a slot whose query has ended (or expired) is given back; one whose query has been running, or admitted
  without its driver starting, for longer than ``stale_s`` (the Lambda maximum of 15 minutes and a margin) is
  failed ("the driver function stopped") and given back.

Limits (:class:`AdmissionLimits`) come from the ``[service]`` settings (``max_running``, ``max_queued``,
``user_running``, ``user_queued``); resource groups and the fast lane are ``squall serve``'s (the API function
does not plan queries). The default ``max_running`` is :func:`default_max_running`: a query takes its driver
and up to ``max_workers`` workers, all of which must fit the Lambda concurrency the deployment has.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from squall.service import records
from squall.service.scheduler import QueueFull
from squall.service.state import Entry, StateStore

log = logging.getLogger("squall.service")

RUNNING = "_admission/running"
USERS = "_admission/users"
QUEUE = "_admission/queue"
RUNS = "_admission/runs.json"
GROUP = "default"
#: a running slot older than this is checked for a query that ended without giving it back (seconds)
CHECK_AFTER_S = 30.0
#: a claim on a queued query that has not started it after this long was left by a promoter that died (seconds;
#: the API function's timeout is 29 s)
CLAIM_TTL_S = 60.0
#: a query running (or admitted and not started) longer than this has lost its driver: Lambda's 15 min + margin
STALE_S = 960.0
#: a status request promotes at most this often per API instance (seconds): a listing of the queued queries
#: reads the status of each
PROMOTE_EVERY_S = 1.0
#: run times kept for the wait estimate, and the run time assumed before any is known (seconds)
HISTORY = 20
FIRST_GUESS_S = 10.0
#: what a Lambda account has when nothing says otherwise (concurrent executions per region)
DEFAULT_CONCURRENCY = 1000


def default_max_running(concurrency: int, max_workers: int) -> int:
    """Queries that may run at once when each takes a driver and up to ``max_workers`` workers out of
    ``concurrency`` concurrent Lambda executions: ``concurrency // (1 + max_workers)``, at least 1."""
    return max(1, int(concurrency) // (1 + max(1, int(max_workers))))


@dataclass(frozen=True)
class AdmissionLimits:
    """Running and queued queries in all and per user (None: no own per-user limit)."""

    max_running: int
    max_queued: int
    user_running: int | None = None
    user_queued: int | None = None


def user_key(user: str) -> str:
    """The user's part of admission keys: 16 hex digits of the SHA-256 of the name (any name fits a key)."""
    return hashlib.sha256(user.encode()).hexdigest()[:16]


def claim_key(query_id: str) -> str:
    return f"{query_id}/admission.json"


@dataclass(frozen=True)
class Queued:
    """A queue entry: the query, its user's key, when it was submitted (milliseconds) and the user's own running
    limit from the users file (None: the deployment's ``user_running``), kept in the entry's name so a listing
    tells every instance all it needs to start it."""

    ms: int
    query_id: str
    ukey: str
    user_running: int | None = None

    @classmethod
    def of(cls, query_id: str, user: str, now: float, user_running: int | None = None) -> Queued:
        created = records.query_time(query_id)
        return cls(
            int((created if created is not None else now) * 1000), query_id, user_key(user), user_running
        )

    @classmethod
    def parse(cls, name: str) -> Queued | None:
        parts = name.split("-")
        if len(parts) not in (3, 4) or not parts[0].isdigit() or not records.valid_query_id(parts[1]):
            return None
        own = None
        if len(parts) == 4:
            if not (parts[3].startswith("r") and parts[3][1:].isdigit()):
                return None
            own = int(parts[3][1:])
        return cls(int(parts[0]), parts[1], parts[2], own)

    @property
    def key(self) -> str:
        own = f"-r{self.user_running}" if self.user_running is not None else ""
        return f"{QUEUE}/{self.ms:013d}-{self.query_id}-{self.ukey}{own}"


def estimate_wait(running_ages: list[float], free: int, mean: float, ahead: int) -> float:
    """Seconds until a query with ``ahead`` queries before it may start: running queries end as they reach the
    ``mean`` run time, ``free`` slots are free now, and each query ahead takes a slot for ``mean``."""
    frees = [max(0.0, mean - age) for age in running_ages] + [0.0] * max(0, free)
    if not frees:
        return mean
    heapq.heapify(frees)
    for _ in range(ahead):
        heapq.heappush(frees, heapq.heappop(frees) + mean)
    return frees[0]


class Admission:
    """Admission over ``store`` (see the module doc) with ``limits`` for every user. ``launch(query_id)`` starts
    an admitted query's driver (asynchronously); ``clock``: wall-clock seconds; ``stale_s``: see :data:`STALE_S`."""

    def __init__(
        self,
        store: StateStore,
        limits: AdmissionLimits,
        launch: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.time,
        stale_s: float = STALE_S,
    ) -> None:
        self.store = store
        self.limits = limits
        self.launch = launch
        self.clock = clock
        self.stale_s = stale_s
        self._checked: dict[str, float] = {}  # running slot → when this instance last checked it
        self._promoted_at = float("-inf")  # when queue_info last promoted

    # --- submit, promote, end -------------------------------------------------------------------------

    def submit(
        self, query_id: str, user: str, *, user_running: int | None = None, user_queued: int | None = None
    ) -> bool:
        """Admit the query: True when it started, False when it waits; QueueFull (429) when it may not wait.
        ``user_running``, ``user_queued``: the user's own limits (the users file's ``max_running``,
        ``max_queued``) instead of the deployment's."""
        entry = Queued.of(query_id, user, self.clock(), user_running)
        self.store.put_json(entry.key, {"user": user})
        if query_id in self.promote():
            return True
        refusal = self._refusal(entry, user, self.queue(), user_queued)
        if refusal is None:
            return False
        if not self.store.put_json(claim_key(query_id), {"refused": True}, create_only=True):
            return False  # another instance is starting it this moment
        self.store.delete(entry.key)
        raise refusal

    def promote(self) -> list[str]:
        """Start queued queries, oldest first, while slots are free; the ids started here."""
        queue = self.queue()
        if not queue:
            return []
        taken = {e.name for e in self._slots()}
        free = [n for n in range(self.limits.max_running) if str(n) not in taken]
        if not free and self._heal():
            taken = {e.name for e in self._slots()}
            free = [n for n in range(self.limits.max_running) if str(n) not in taken]
        started: list[str] = []
        blocked: set[str] = set()  # users at their running limit
        for entry in queue:
            if not free:
                break
            if entry.ukey in blocked:
                continue
            outcome = self._start(entry, free)
            if outcome == "user" and self._heal(f"{USERS}/{entry.ukey}"):
                outcome = self._start(entry, free)  # a slot of the user's was held by an ended query
            if outcome == "started":
                started.append(entry.query_id)
            elif outcome == "user":
                blocked.add(entry.ukey)
        return started

    def finished(self, query_id: str) -> list[str]:
        """The driver's end hook: if the query has ended, give back its slots and record its run time; then
        promote. The ids started."""
        status = self.store.get_json(records.status_key(query_id)) or {}
        if status.get("status") in records.TERMINAL:
            claim = self.store.get_json(claim_key(query_id)) or {}
            self._release(query_id, claim)
            self._record_run(status)
        return self.promote()

    def cancel(self, query_id: str) -> bool:
        """Take a queued query out of the queue for good (True: the caller records it cancelled); False when it
        is not queued (it runs, or is being started: its driver sees the cancel marker)."""
        if not self.store.put_json(claim_key(query_id), {"cancelled": True}, create_only=True):
            return False
        entry = next((e for e in self.queue() if e.query_id == query_id), None)
        if entry is not None:
            self.store.delete(entry.key)
        return True

    # --- the steps of a start -------------------------------------------------------------------------

    def _start(self, entry: Queued, free: list[int]) -> str:
        """Start one queued query: "started", "taken" (another instance has it), "user" (its user is at the
        limit), "full" (no running slot left) or "gone" (cancelled meanwhile)."""
        qid = entry.query_id
        user_limit = entry.user_running if entry.user_running is not None else self.limits.user_running
        held = (
            {e.name for e in self.store.entries(f"{USERS}/{entry.ukey}")} if user_limit is not None else set()
        )
        if user_limit is not None and len(held) >= user_limit:
            return "user"  # (a slot is taken with a conditional write: this listing only saves a claim)
        claim: dict[str, Any] = {"user_key": entry.ukey, "claimed_at": self.clock()}
        if not self.store.put_json(claim_key(qid), claim, create_only=True):
            self._settle_claimed(entry)
            return "taken"
        if self.store.exists(records.cancel_key(qid)):
            self.store.delete(entry.key)  # the claim stays: nobody starts it
            record_cancelled(self.store, qid)
            return "gone"
        user_slot = None
        if user_limit is not None:
            user_slot = self._take(
                f"{USERS}/{entry.ukey}", [n for n in range(user_limit) if str(n) not in held], qid
            )
            if user_slot is None:
                self.store.delete(claim_key(qid))
                return "user"
        slot = self._take(RUNNING, free, qid)
        del free[: len(free) if slot is None else free.index(slot) + 1]  # taken: by this query, or by others
        if slot is None:
            self._release(qid, {"user_key": entry.ukey, "user_slot": user_slot})
            self.store.delete(claim_key(qid))
            return "full"
        claim.update(slot=slot, user_slot=user_slot, started_at=self.clock())
        self.store.put_json(claim_key(qid), claim)
        self.store.delete(entry.key)
        try:
            self.launch(qid)
        except Exception as err:  # the driver cannot be started: the query fails, its slots are free again
            log.warning("cannot start the driver of %s", qid, exc_info=True)
            _fail(self.store, qid, "DriverUnavailable", f"the driver function could not be started: {err}")
            self._release(qid, claim)
            return "full"
        return "started"

    def _take(self, prefix: str, numbers: list[int], query_id: str) -> int | None:
        """Create the first of ``prefix/<n>`` for the free ``numbers`` that is still free (create-only: a slot
        another instance took meanwhile is skipped); its number, or None."""
        for n in numbers:
            if self.store.put_json(f"{prefix}/{n}", {"query_id": query_id}, create_only=True):
                return n
        return None

    def _release(self, query_id: str, claim: dict[str, Any]) -> None:
        """Give back the query's slots — each only while it still names this query (conditional delete)."""
        keys = []
        if claim.get("slot") is not None:
            keys.append(f"{RUNNING}/{claim['slot']}")
        if claim.get("user_slot") is not None and claim.get("user_key"):
            keys.append(f"{USERS}/{claim['user_key']}/{claim['user_slot']}")
        for key in keys:
            found = self.store.get_tagged(key)
            if found is not None and json.loads(found[0]).get("query_id") == query_id:
                self.store.delete_if(key, found[1])

    def _settle_claimed(self, entry: Queued) -> None:
        """A queue entry whose query another promoter claimed: removed when the query was started, refused or
        cancelled (that promoter may have died before removing it); when the claim is older than
        :data:`CLAIM_TTL_S` and nothing came of it, the claim is dropped (conditionally: once) so that the next
        promotion starts the query."""
        found = self.store.get_tagged(claim_key(entry.query_id))
        if found is None:
            return
        claim = json.loads(found[0])
        if claim.get("started_at") is not None or claim.get("cancelled") or claim.get("refused"):
            self.store.delete(entry.key)
        elif self.clock() - float(claim.get("claimed_at") or 0) > CLAIM_TTL_S:
            self.store.delete_if(claim_key(entry.query_id), found[1])

    # --- healing --------------------------------------------------------------------------------------

    def _heal(self, prefix: str = RUNNING) -> bool:
        """Give back the slots under ``prefix`` (running slots, or one user's) whose query ended without doing so
        (see the module doc); True if any."""
        now = self.clock()
        healed = False
        for slot in self.store.entries(prefix):
            age = now - slot.modified
            key = f"{prefix}/{slot.name}"
            if age < CHECK_AFTER_S or now - self._checked.get(key, 0.0) < CHECK_AFTER_S:
                continue
            self._checked[key] = now
            found = self.store.get_tagged(key)
            if found is None:
                healed = True
                continue
            qid = str(json.loads(found[0]).get("query_id"))
            if self._lost(qid, age):
                self.store.delete_if(key, found[1])
                self._release(qid, self.store.get_json(claim_key(qid)) or {})
                healed = True
        return healed

    def _lost(self, query_id: str, age: float) -> bool:
        """Whether the query holding a slot for ``age`` seconds no longer runs (failing it when its driver is
        gone)."""
        status = (
            self.store.get_json(records.status_key(query_id)) if records.valid_query_id(query_id) else None
        )
        if status is None or status.get("status") in records.TERMINAL:
            return True
        started = status.get("started_at")
        since = self.clock() - started if isinstance(started, (int, float)) else age
        if since < self.stale_s:
            return False
        what = "stopped without finishing the query" if status.get("status") == "running" else "never started"
        _fail(self.store, query_id, "DriverStopped", f"the driver function {what} (Lambda timeout or crash)")
        return True

    # --- what stands where ----------------------------------------------------------------------------

    def queue(self) -> list[Queued]:
        """The queued queries, oldest first."""
        entries = (Queued.parse(e.name) for e in self.store.entries(QUEUE))
        return sorted((e for e in entries if e is not None), key=lambda e: (e.ms, e.query_id))

    def _slots(self) -> list[Entry]:
        return [e for e in self.store.entries(RUNNING) if e.name.isdigit()]

    def running(self) -> int:
        """Queries holding a running slot."""
        return len(self._slots())

    def queue_info(self, query_id: str) -> dict[str, Any] | None:
        """``{"position", "ahead", "estimated_wait_s", "group"}`` of a queued query after a promotion (which may
        start it; at most one every :data:`PROMOTE_EVERY_S` here); None when it does not wait (anymore)."""
        now = self.clock()
        if now - self._promoted_at >= PROMOTE_EVERY_S:  # (a listing of queued queries asks for each of them)
            self._promoted_at = now
            self.promote()
        queue = self.queue()
        index = next((i for i, e in enumerate(queue) if e.query_id == query_id), None)
        if index is None:
            return None
        return {"position": index + 1, "ahead": index,
                "estimated_wait_s": round(self._wait(index), 1), "group": GROUP}  # fmt: skip

    def _wait(self, ahead: int) -> float:
        now = self.clock()
        slots = self._slots()
        ages = [max(0.0, now - s.modified) for s in slots]
        runs = (self.store.get_json(RUNS) or {}).get("runs") or []
        mean = sum(runs) / len(runs) if runs else max([FIRST_GUESS_S, *ages])
        return estimate_wait(ages, self.limits.max_running - len(slots), mean, ahead)

    def _refusal(
        self, entry: Queued, user: str, queue: list[Queued], user_queued: int | None = None
    ) -> QueueFull | None:
        """Why the queued ``entry`` of ``user`` may not wait (the oldest entries keep their places), or None.
        ``user_queued``: the user's own limit (default: the deployment's)."""
        if entry not in queue:
            return None  # started (or being started) by another instance meanwhile
        rank = queue.index(entry) + 1
        user_rank = [e for e in queue if e.ukey == entry.ukey].index(entry) + 1
        limits = self.limits
        own = user_queued is not None
        user_queued = user_queued if own else limits.user_queued
        if rank > limits.max_queued:
            reason = f"the queue is full: {rank - 1} queries are waiting (max_queued = {limits.max_queued})"
        elif user_queued is not None and user_rank > user_queued:
            setting = "max_queued in the users file" if own else "user_queued"
            reason = f"user {user!r} has {user_rank - 1} queries waiting ({setting} = {user_queued})"
        else:
            return None
        return QueueFull(f"{reason}; retry later", max(1, math.ceil(self._wait(0))))

    def _record_run(self, status: dict[str, Any]) -> None:
        """Add the ended query's run time to the recent ones (last writer wins: it is only an estimate)."""
        started, finished = status.get("started_at"), status.get("finished_at")
        if not isinstance(started, (int, float)) or not isinstance(finished, (int, float)):
            return
        try:
            runs = list((self.store.get_json(RUNS) or {}).get("runs") or [])[-(HISTORY - 1) :]
            self.store.put_json(RUNS, {"runs": [*runs, round(max(0.0, finished - started), 3)]})
        except Exception:  # an estimate is not worth failing for
            log.warning("cannot record a run time", exc_info=True)


def _fail(store: StateStore, query_id: str, error: str, detail: str) -> None:
    """Record a query that the admission gave up on as failed (unless it has ended meanwhile)."""
    doc = store.get_json(records.status_key(query_id)) or {"query_id": query_id}
    if doc.get("status") in records.TERMINAL:
        return
    doc.update(status="failed", finished_at=time.time(), error={"error": error, "detail": detail})
    store.put_json(records.status_key(query_id), doc)


def record_cancelled(store: StateStore, query_id: str) -> None:
    """Record a queued query that was cancelled (its driver never runs)."""
    doc = store.get_json(records.status_key(query_id)) or {"query_id": query_id}
    if doc.get("status") == "queued":
        doc.update(status="cancelled", finished_at=time.time(),
                   error={"error": "QueryCancelled", "detail": "query cancelled before it started"})  # fmt: skip
        store.put_json(records.status_key(query_id), doc)
