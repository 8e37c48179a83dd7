"""The Platform interface: where a plan's W workers run.

A platform starts the ranks of a plan (local processes, Lambda invocations,
ranks on an RDMA cluster), wires them to an exchange, and returns rank 0's
result with every rank's report. Implementations are looked up by name.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from squall.errors import OptionError
from squall.plan import Plan


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
    ``execute`` once per query (not concurrently), ``close`` when the connection closes."""

    name: ClassVar[str]
    world_size: int

    @abstractmethod
    def execute(
        self, plan: Plan, query_id: str, progress: Callable[[Progress], None] | None = None
    ) -> Execution:
        """Run ``plan`` on every rank and return rank 0's result."""

    def cancel(self) -> None:  # noqa: B027 - optional
        """Abort the running query (best effort)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Stop workers and release resources."""


_REGISTRY: dict[str, str] = {
    "local": "squall.driver.local:LocalPlatform",
    "fabric": "squall.driver.fabric_platform:FabricPlatform",
    "lambda": "squall.driver.lambda_platform:LambdaPlatform",
    "lambda-local": "squall.driver.lambda_platform:LocalLambdaPlatform",
}


def register_platform(name: str, target: str) -> None:
    _REGISTRY[name] = target


def platform_class(name: str) -> type[Platform]:
    try:
        module_name, cls_name = _REGISTRY[name].split(":")
    except KeyError:
        raise OptionError(
            f"unknown platform {name!r} (choose one of: {', '.join(sorted(_REGISTRY))})"
        ) from None
    return getattr(importlib.import_module(module_name), cls_name)
