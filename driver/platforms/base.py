"""The Platform interface: where a plan's W workers run.

A platform starts the ranks of a plan (local processes, Lambda invocations,
ranks on an RDMA cluster), wires them to an exchange, and returns rank 0's
result with every rank's report. Implementations are looked up by name in
:data:`PLATFORMS` and declare what they can work with as class attributes
(their capabilities), which the CLI, the SDK and the service read instead of
naming platforms.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from squall.errors import OptionError
from squall.operators.storage import scheme_of
from squall.plan import Plan
from squall.registry import Registry


@dataclass
class Progress:
    """Stages finished per rank, reported while a query runs."""

    stages: int
    world_size: int
    done: dict[int, int] = field(default_factory=dict)  # stage id -> ranks done

    @property
    def fraction(self) -> float:
        total = self.stages * self.world_size
        return sum(self.done.values()) / total if total else 1.0


@dataclass
class Execution:
    """What a platform returns: the result table and one report dict per rank."""

    table: pa.Table
    reports: list[dict[str, Any]]
    details: dict[str, Any] = field(default_factory=dict)


class Platform(ABC):
    """Runs plans on ``world_size`` workers. Lifecycle: created by a Connection,
    ``execute`` once per query (not concurrently), ``close`` when the connection closes.

    Capabilities (class attributes, read without creating a platform):

    - ``exchanges``: the exchanges its workers can trade data through, the default first;
    - ``storages``: the storage schemes its workers can read tables from (``file``, ``s3``);
    - ``needs_s3_location``: its exchange and run state live in S3, so it needs
      ``--exchange s3://bucket/prefix`` or ``SQUALL_BUCKET`` to run a query (not to plan or estimate one:
      :meth:`check_ready`);
    - ``options``: the keyword options of its constructor that the CLI and the API pass through by name
      (``--fanout``, ``--function``, ``--provider``).
    """

    name: ClassVar[str]
    exchanges: ClassVar[tuple[str, ...]] = ("local",)
    storages: ClassVar[tuple[str, ...]] = ("file", "s3")
    needs_s3_location: ClassVar[bool] = False
    options: ClassVar[tuple[str, ...]] = ()
    #: the platform takes ``worker_memory=`` and ``memory=`` (bytes): its workers run on machines it sizes itself
    memory_options: ClassVar[bool] = False
    world_size: int

    @classmethod
    def check_exchange(cls, exchange: str | None) -> str:
        """The exchange to use (``exchange``, else the default); OptionError when the platform cannot use it."""
        chosen = exchange or cls.exchanges[0]
        if chosen not in cls.exchanges:
            raise OptionError(
                f"the {cls.name} platform cannot use the {chosen!r} exchange "
                f"(it exchanges through {' or '.join(cls.exchanges)})"
            )
        return chosen

    @classmethod
    def check_storage(cls, location: str) -> None:
        """OptionError when the platform's workers cannot read tables at ``location``."""
        scheme = scheme_of(location)
        if scheme not in cls.storages:
            kinds = " or ".join("local files" if s == "file" else f"{s}:// locations" for s in cls.storages)
            raise OptionError(f"the {cls.name} platform's workers read {kinds}, not {location!r}")

    def check_ready(self) -> None:  # noqa: B027 - optional
        """OptionError (one line) when the platform cannot run a query as configured, e.g. a lambda platform
        without a bucket or a worker function. Made lazy on purpose: planning, ``explain`` and the scale
        model's estimate need only the tables' metadata, so a platform is created without these and checks
        them here, before it runs a query (:meth:`execute` and the connection call it)."""

    def ranks_per_core(self, world_size: int) -> float:
        """How many ranks of a ``world_size`` plan share one core (1.0: every rank has cores of its own, as
        Lambda functions and cluster nodes do). The connection passes it to the planner
        (``PlannerOptions.ranks_per_core``), which scales its skew-handling threshold by it: a skew-aware
        join's histogram round is a barrier, cheap where each rank has its own core and dear where ranks
        take turns on shared ones."""
        return 1.0

    @abstractmethod
    def execute(
        self, plan: Plan, query_id: str, progress: Callable[[Progress], None] | None = None
    ) -> Execution:
        """Run ``plan`` on every rank and return rank 0's result."""

    def cancel(self) -> None:  # noqa: B027 - optional
        """Abort the running query (best effort)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Stop workers and release resources."""


#: platform name -> Platform class, imported on first use
PLATFORMS: Registry[type[Platform]] = Registry(
    "platform",
    {
        "local": "squall.driver.platforms.local.platform:LocalPlatform",
        "fabric": "squall.driver.platforms.fabric.platform:FabricPlatform",
        "lambda": "squall.driver.platforms.lambda_.platform:LambdaPlatform",
        "lambda-local": "squall.driver.platforms.lambda_.platform:LocalLambdaPlatform",
    },
)


def register_platform(name: str, target: str | type[Platform]) -> None:
    """Add a platform: a ``"module:Class"`` string (imported on first use) or the class itself."""
    PLATFORMS.register(name, target)


def platform_class(name: str) -> type[Platform]:
    """The Platform class registered as ``name``; OptionError naming the choices otherwise."""
    return PLATFORMS.get(name)
