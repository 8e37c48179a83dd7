"""Platform backends the shared platform suite runs against.

Each backend stands up what its platform needs for one test module (a private
exchange folder, moto's S3 server with buckets, a libfabric provider) and
yields a :class:`Site`: it opens ``squall.connect(...)`` connections by platform
*name* (no platform module is imported here, so moving them does not matter)
and lists what a query left behind. Add a backend by appending to
``BACKENDS``; every test in ``test_platform_suite.py`` then runs against it.

Capabilities a test may read (ibis style, instead of checking names):

- ``queries``: the TPC-H queries it runs against DuckDB (every backend runs
  ``SUBSET``; local-s3, lambda-local and fabric-tcp all 22: the platforms whose storage scan, executor or
  exchange the local platform does not run);
- ``recovers_crashes``: a crashed rank is re-run (Lambda) instead of failing the query;
- ``check_stats``: platform-specific assertions on every TPC-H result's stats.
"""

from __future__ import annotations

import contextlib
import math
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import squall
from squall import tpch
from squall.tpch import dataset_files

#: joins + aggregates (Q1, Q3), EXISTS (Q4), outer join (Q13), IN-subquery + top-k (Q18),
#: semi/anti joins (Q21), scalar subquery + NOT EXISTS (Q22)
SUBSET = (1, 3, 4, 13, 18, 21, 22)
ALL = tuple(tpch.QUERY_NUMBERS)
SF = 0.1


class Site:
    """One backend, stood up: opens connections, says what a query left behind."""

    def __init__(self, backend: Backend, tmp: Path) -> None:
        self.backend, self.tmp = backend, tmp

    def data(self, local: Path) -> str:
        """Where the platform reads the dataset at ``local`` from (uploaded first if needed)."""
        return str(local)

    def options(self, workers: int) -> dict[str, Any]:
        """``squall.connect`` keyword options besides ``data`` and ``workers``."""
        return {}

    def connect(self, local: Path, workers: int | None = None, **extra: Any) -> squall.Connection:
        w = workers or self.backend.workers
        options = self.options(w)
        for key, value in extra.items():  # merge dict options (platform_options, …)
            options[key] = {**options.get(key, {}), **value} if isinstance(value, dict) else value
        con = squall.connect(data=self.data(local), workers=w, **options)
        assert isinstance(con, squall.Connection)
        return con

    def leftovers(self) -> list[str]:
        """Anything a finished (or failed) query left behind; [] when clean."""
        return []


def _rendezvous_threads() -> list[str]:
    """The fabric exchange's rendezvous servers still running in this (driver) process."""
    return [t.name for t in threading.enumerate() if t.name == "squall-rendezvous" and t.is_alive()]


class _LocalSite(Site):
    """Local workers, exchange in a folder of the test's own (so its leftovers are ours alone)."""

    def __init__(self, backend: Backend, tmp: Path) -> None:
        super().__init__(backend, tmp)
        self.root = tmp / "xchg"

    def options(self, workers: int) -> dict[str, Any]:
        return {"exchange": "local", "exchange_options": {"root": str(self.root)}}

    def leftovers(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir()) if self.root.exists() else []


class _S3Site(Site):
    """moto's S3 server: the exchange (and for ``local-s3`` the data) in its buckets."""

    DATA_BUCKET = "squall-platform-data"
    XCHG_BUCKET = "squall-platform-xchg"

    def __init__(self, backend: Backend, tmp: Path, s3: Any) -> None:
        super().__init__(backend, tmp)
        self.s3 = s3
        self.prefix = f"{backend.name}-{uuid.uuid4().hex[:8]}"
        self.exchange_url = f"s3://{self.XCHG_BUCKET}/{self.prefix}"
        self._uploaded: dict[Path, str] = {}

    def upload(self, local: Path) -> str:
        """``s3://`` URL of a copy of the dataset at ``local`` (uploaded once per site)."""
        if local not in self._uploaded:
            client = self.s3.client()
            key = f"{self.prefix}/{local.name}"
            for files in dataset_files(local).values():
                for f in files:
                    client.upload_file(str(f), self.DATA_BUCKET, f"{key}/{f.relative_to(local)}")
            self._uploaded[local] = f"s3://{self.DATA_BUCKET}/{key}"
        return self._uploaded[local]

    def exchange_objects(self) -> list[str]:
        listed = self.s3.client().list_objects_v2(Bucket=self.XCHG_BUCKET, Prefix=f"{self.prefix}/")
        return [o["Key"] for o in listed.get("Contents", [])]

    def leftovers(self) -> list[str]:
        return self.exchange_objects()


class _LocalS3Site(_S3Site):
    def data(self, local: Path) -> str:
        return self.upload(local)

    def options(self, workers: int) -> dict[str, Any]:
        return {"exchange": self.exchange_url, "exchange_options": {"levels": 2}}


class _LambdaSite(_S3Site):
    def options(self, workers: int) -> dict[str, Any]:
        fanout = max(2, math.isqrt(workers - 1) + 1) if workers > 1 else 2
        return {
            "platform": "lambda-local",
            "exchange": self.exchange_url,
            "platform_options": {"fanout": fanout},
        }

    def leftovers(self) -> list[str]:
        # a late copy of a rank may still write the ABORT marker that stops it; the emulator's clean-up after
        # the late copies removes it, the bucket's lifecycle rule does on AWS
        return [k for k in self.exchange_objects() if not k.endswith("/ABORT")]


class _FabricSite(Site):
    def __init__(self, backend: Backend, tmp: Path, provider: str) -> None:
        super().__init__(backend, tmp)
        self.provider = provider

    def options(self, workers: int) -> dict[str, Any]:
        return {"platform": "fabric", "platform_options": {"provider": self.provider}}

    def leftovers(self) -> list[str]:
        return _rendezvous_threads()


@dataclass(frozen=True)
class Backend:
    name: str
    #: context manager factory: (tmp_path) -> yields a Site
    open: Callable[[Backend, Path], contextlib.AbstractContextManager[Site]]
    #: workers of the suite's connections
    workers: int
    #: reason to skip on this machine, or None
    skip: Callable[[], str | None] = lambda: None
    queries: tuple[int, ...] = SUBSET
    recovers_crashes: bool = False
    #: extra assertions on the stats of every TPC-H result
    check_stats: Callable[[dict[str, Any]], None] = lambda stats: None
    #: workers of the fresh connections the fault tests open (smaller: they start cold)
    fault_workers: int = field(default=2)


# --- skip reasons -----------------------------------------------------------------------------------


def _moto_skip() -> str | None:
    from ..s3server import moto_available

    reason = moto_available()
    return f"moto: {reason}" if reason else None


def _fabric_skip() -> str | None:
    """Skip only when the native module is missing (no libfabric, `make native` not run), saying why."""
    from squall.exchange.fabric import native_available

    reason = native_available()
    return f"libfabric: {reason}" if reason else None


# --- openers --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _open_local(backend: Backend, tmp: Path) -> Iterator[Site]:
    yield _LocalSite(backend, tmp)


def _open_s3(kind: type[_S3Site]) -> Callable[[Backend, Path], contextlib.AbstractContextManager[Site]]:
    @contextlib.contextmanager
    def open_s3(backend: Backend, tmp: Path) -> Iterator[Site]:
        from ..s3server import moto_s3

        with moto_s3(_S3Site.DATA_BUCKET, _S3Site.XCHG_BUCKET) as s3:
            yield kind(backend, tmp, s3)

    return open_s3


def _open_fabric(provider: str) -> Callable[[Backend, Path], contextlib.AbstractContextManager[Site]]:
    @contextlib.contextmanager
    def open_fabric(backend: Backend, tmp: Path) -> Iterator[Site]:
        yield _FabricSite(backend, tmp, provider)

    return open_fabric


# --- per-platform stats checks (on every TPC-H result) ---------------------------------------------


def check_s3_request_formulas(stats: dict[str, Any], levels: int) -> None:
    """Requests per S3 exchange, summed over the ranks (S senders, R receivers, g = ⌈√R⌉), exchange v2.

    - one level: ``put - put_dup ≤ S`` (one object per sender) and ``get_data ≤ S·R`` (one ranged GET per
      (sender, receiver) pair with data; W² at most);
    - two levels (hash, S = R = W): ``put - put_dup ≤ 2W`` and ``get_data ≤ 2W·g``;
    - both: ``get_index == get_miss == 0`` (range lengths travel in the key names, a receiver only GETs
      keys it listed) and one LIST per reading rank per polling round (``list == poll_rounds``; every
      range ≤ part_size at this scale).

    ``poll_rounds`` (more than one when a sender is late) and ``head`` (abort checks, one per second of
    waiting) depend on timing: reported, not bounded.
    """
    for e in stats["exchanges"]:
        s, r = e["senders"], e["receivers"]
        assert e["levels"] == (levels if e["kind"] == "hash" and s == r else 1), e
        assert e["get"] >= e["get_index"] + e["get_data"] + e["get_miss"], e  # (+ schema, abort-reason reads)
        assert e["get_index"] == 0 and e["get_miss"] == 0, e
        assert e["list"] == e["poll_rounds"], e
        writes = e["put"] - e["put_dup"]
        if e["levels"] == 1:
            assert writes <= s, e
            assert e["get_data"] <= s * r, e
        else:
            g = math.isqrt(r - 1) + 1
            assert writes <= 2 * r, e
            assert e["get_data"] <= 2 * r * g, e
        assert e["bytes_read"] >= 0 and e["bytes_written"] >= 0


def check_s3_scan_requests(stats: dict[str, Any]) -> None:
    """Workers read S3 tables with ranged GETs only (object sizes come with the footer GET, no HEADs)."""
    assert set(stats["storage_requests"]) <= {"get"}, stats["storage_requests"]
    assert stats["storage_requests"].get("get", 0) >= 1
    assert set(stats["driver_storage_requests"]) <= {"get", "head", "list"}


def _check_local_s3(stats: dict[str, Any]) -> None:
    check_s3_request_formulas(stats, 2)
    check_s3_scan_requests(stats)
    assert stats["exchanges"], "a multi-worker plan exchanges data"


def _check_lambda(stats: dict[str, Any]) -> None:
    lam = stats["lambda"]
    assert lam["tree_depth"] == 2 and lam["fanout"] == 4
    # 4 from the driver, 12 by first-level workers (+ duplicates of stragglers on a busy machine)
    assert lam["invocations"] == 16 + lam["duplicates"] + lam["retries"], {
        k: lam[k] for k in ("invocations", "duplicates", "retries", "relaunched")
    }
    assert lam["startup_s"]["all"] is not None and lam["startup_s"]["all"] >= lam["startup_s"]["first"]
    assert stats["cost_usd"] > 0 and stats["cost"]["gb_seconds"] > 0


def _check_fabric(stats: dict[str, Any]) -> None:
    assert stats["platform"] == "fabric"
    if any(s["output"] in ("hash", "broadcast", "gather") for s in stats["stages"]):
        assert stats["exchange_requests"].get("write", 0) > 0


BACKENDS: list[Backend] = [
    Backend("local", _open_local, workers=4),
    Backend(
        "local-s3",
        _open_s3(_LocalS3Site),
        workers=4,
        skip=_moto_skip,
        queries=ALL,
        check_stats=_check_local_s3,
    ),
    Backend(
        "lambda-local",
        _open_s3(_LambdaSite),
        workers=16,
        skip=_moto_skip,
        queries=ALL,
        recovers_crashes=True,
        check_stats=_check_lambda,
        fault_workers=4,
    ),
    Backend(
        "fabric-tcp",
        _open_fabric("tcp"),
        workers=4,
        skip=_fabric_skip,
        queries=ALL,
        check_stats=_check_fabric,
    ),
    Backend(
        "fabric-shm",
        _open_fabric("shm"),
        workers=4,
        skip=_fabric_skip,
        queries=SUBSET,  # fabric-tcp runs all 22 through the same exchange code; shm differs in transport only
        check_stats=_check_fabric,
    ),
]


def backend_named(name: str) -> Backend:
    """The backend called ``name`` (for the platform-specific modules)."""
    return next(b for b in BACKENDS if b.name == name)
