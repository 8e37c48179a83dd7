"""The settings of ``squall serve``'s scheduler, worker pool and per-query limits.

From the ``[service]`` table of ``squall.toml`` and the ``squall serve`` flags (flags win), with defaults
that fit the machine (``cores``: its CPU count):

=====================  ==============================================================  =========================
key (flag)             meaning                                                         default
=====================  ==============================================================  =========================
``max_running``        queries running at once, all resource groups together           ``2 * cores`` (at least 2)
``max_queued``         queries waiting, all groups together (more: 429)                64
``long_running``       of them, queries outside the fast lane (group ``default``)      ``cores``
``fast_lane_bytes``    a query reading at most this runs in the fast lane (``fast``)   16 MiB
``user_running``       queries running per user and group                              no own limit
``user_queued``        queries waiting per user and group                              no own limit
``pool_workers``       worker processes shared by every query (any W)                  ``max_running * workers``, at most 8 per core
``warm_workers``       of them, started with the server                                ``(long_running + 1) * workers``
``max_scan_bytes``     a query whose plan reads more is refused before it runs         100 GiB
``max_result_rows``    a larger result is refused (use COPY or ``--output``)           10,000,000
``max_result_bytes``   likewise, in bytes (Arrow)                                      256 MiB
``max_run_time``       the server's maximum run time of a query                        30m
``worker_memory``      memory budget of each pool worker (any query's rank): DuckDB   the machine's memory shared
                       spills past its share, a stage that cannot fit fails clearly    by the pool and the driver
``adaptive_workers``   a query that names no W runs on at most ``cores // load``      true
                       workers (``load``: queries running or waiting as it starts)
``audit_log``          a file for the audit lines (``-``: stdout; see squall.service.audit)  none
=====================  ==============================================================  =========================

Sizes are a number of bytes or a text such as ``"16MB"``, ``"1.5GiB"``; durations a number of seconds or
``"30m"``, ``"2h"``; ``"off"`` lifts a limit. ``[service.groups.NAME]`` tables add resource groups that are
tried before the built-in ones, with keys ``max_running``, ``max_queued``, ``weight``, ``user_running``,
``user_queued``, ``max_scan_bytes`` and ``users`` (a list): see :mod:`squall.service.scheduler`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from squall.errors import OptionError
from squall.service.runner import Limits
from squall.service.scheduler import DEFAULT, FAST, GroupSpec, SchedulerConfig
from squall.sizes import GIB, MIB, parse_duration, parse_size

__all__ = ["GIB", "MIB", "ServiceSettings", "parse_duration", "parse_size"]

_GROUP_KEYS = (
    "max_running",
    "max_queued",
    "weight",
    "user_running",
    "user_queued",
    "max_scan_bytes",
    "users",
)


@dataclass(frozen=True)
class ServiceSettings:
    """See the module doc. ``None`` for a limit: no limit; for ``pool_workers``: the default."""

    max_running: int
    max_queued: int = 64
    long_running: int = 1
    fast_lane_bytes: int = 16 * MIB
    user_running: int | None = None
    user_queued: int | None = None
    pool_workers: int | None = None
    warm_workers: int | None = None
    max_scan_bytes: int | None = 100 * GIB
    max_result_rows: int | None = 10_000_000
    max_result_bytes: int | None = 256 * MIB
    max_run_time: float | None = 1800.0
    worker_memory: int | None = None
    adaptive_workers: bool = True
    groups: tuple[GroupSpec, ...] = ()
    audit_log: str | None = None

    @classmethod
    def defaults(cls, cores: int | None = None) -> ServiceSettings:
        """The defaults for a machine of ``cores`` CPUs (default: this one)."""
        cores = cores or os.cpu_count() or 1
        return cls(max_running=max(2, 2 * cores), long_running=cores)

    @classmethod
    def load(
        cls,
        table: Mapping[str, Any] | None = None,
        flags: Mapping[str, Any] | None = None,
        source: str = "squall.toml",
    ) -> ServiceSettings:
        """The defaults, then the ``[service]`` ``table`` of a config file, then ``flags`` (None values skipped);
        OptionError naming ``source`` and the key on a bad value."""
        settings = cls.defaults()
        known = {f.name for f in fields(cls)}
        for where, given in ((f"{source} [service]", table or {}), ("flags", flags or {})):
            if not isinstance(given, Mapping):
                raise OptionError(f"{where} must be a table of settings")
            changes: dict[str, Any] = {}
            for key, value in given.items():
                if value is None:
                    continue
                if key not in known:
                    raise OptionError(
                        f"{where}: unknown setting {key!r} (settings: {', '.join(sorted(known))})"
                    )
                label = f"--{key.replace('_', '-')}" if where == "flags" else f"{where}: {key}"
                changes[key] = _groups(value, where) if key == "groups" else _value(key, value, label)
            settings = replace(settings, **changes)
        settings.scheduler_config()  # the limits must make sense together
        return settings

    def scheduler_config(self) -> SchedulerConfig:
        """The resource groups: the configured ones, then ``fast`` and ``default``."""
        fast = GroupSpec(FAST, max_running=self.max_running, max_queued=self.max_queued, weight=1,
                         user_running=self.user_running, user_queued=self.user_queued,
                         max_scan_bytes=self.fast_lane_bytes)  # fmt: skip
        slow = GroupSpec(DEFAULT, max_running=min(self.long_running, self.max_running), max_queued=self.max_queued,
                         user_running=self.user_running, user_queued=self.user_queued)  # fmt: skip
        return SchedulerConfig(self.max_running, self.max_queued, (*self.groups, fast, slow))

    def warm(self, max_workers: int, pool_size: int) -> int:
        """Worker processes to start with the server: enough for the long queries and one fast one at once."""
        wanted = self.warm_workers if self.warm_workers is not None else (self.long_running + 1) * max_workers
        return min(wanted, pool_size)

    def limits(self) -> Limits:
        return Limits(self.max_result_rows, self.max_result_bytes, self.max_scan_bytes, self.max_run_time)

    def pool_size(self, max_workers: int, cap: int) -> int:
        """Worker processes of the shared pool for queries of up to ``max_workers`` ranks on a machine that takes
        ``cap`` (see :func:`~squall.driver.platforms.local.platform.max_local_workers`)."""
        if self.pool_workers is None:
            return max(max_workers, min(self.max_running * max_workers, cap))
        if self.pool_workers > cap:
            raise OptionError(
                f"pool_workers must be at most {cap} on this machine (8 per core), got {self.pool_workers}"
            )
        return max(max_workers, self.pool_workers)


def _value(key: str, value: Any, label: str) -> Any:
    """The setting ``key`` from ``value``; OptionError starting with ``label`` (where it was given)."""
    if key == "audit_log":
        if not isinstance(value, str) or not value.strip():
            raise OptionError(f"{label} must be a file name (or - for stdout), got {value!r}")
        return value.strip()
    off = isinstance(value, str) and value.strip().lower() in ("off", "none", "unlimited")
    if key == "worker_memory":
        return None if off else parse_size(value, label)
    if key in ("max_scan_bytes", "max_result_bytes", "fast_lane_bytes"):
        return None if off and key != "fast_lane_bytes" else parse_size(value, label)
    if key == "max_run_time":
        return None if off else parse_duration(value, label)
    if key == "adaptive_workers":
        if not isinstance(value, bool):
            raise OptionError(f"{label} must be true or false, got {value!r}")
        return value
    if off and key in ("user_running", "user_queued", "max_result_rows", "pool_workers", "warm_workers"):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(f"{label} must be a whole number, got {value!r}")
    smallest = 0 if key in ("max_queued", "user_queued", "warm_workers") else 1
    if value < smallest:
        raise OptionError(f"{label} must be at least {smallest}, got {value}")
    return value


def _groups(value: Any, where: str) -> tuple[GroupSpec, ...]:
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise OptionError(f"{where}: groups must be tables [service.groups.NAME]")
    out = []
    for name, props in value.items():
        unknown = sorted(set(props) - set(_GROUP_KEYS))
        if unknown:
            raise OptionError(
                f"{where}: group {name}: unknown key {unknown[0]!r} (keys: {', '.join(_GROUP_KEYS)})"
            )
        if "max_running" not in props:
            raise OptionError(f"{where}: group {name} needs max_running")
        users = props.get("users", [])
        if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
            raise OptionError(f"{where}: group {name}: users must be a list of user names")
        numbers = {k: _value(k if k != "weight" else "max_running", v, f"{where}: group {name}: {k}")
                   for k, v in props.items() if k != "users"}  # fmt: skip
        out.append(
            GroupSpec(str(name), max_queued=numbers.pop("max_queued", 64), users=tuple(users), **numbers)
        )
    return tuple(out)
