"""The memory budget of a worker: what one rank may use at its peak, planned by the platform, kept by the worker.

Who sets it:

- local (and fabric ranks started on this machine): the machine's memory — its cgroup limit when it has one,
  else ``MemTotal`` — or the total given by hand (``memory=``), of which :data:`LOCAL_SHARE` is shared by the
  pool's worker processes and the driver (the driver keeps at most :data:`DRIVER_BYTES`, the workers split the
  rest evenly); or a budget per worker given by hand (``worker_memory=``, ``--worker-memory``);
- lambda: the function's memory (``memory_mb`` of the platform's settings, ``SQUALL_WORKER_MEMORY_MB`` when
  deployed) minus :data:`LAMBDA_RESERVE_MB` for what runs beside the worker's process in the execution
  environment (:func:`lambda_worker_budget_mb`); ``explain --estimate`` prints both.

A budget covers the worker's whole process, its interpreter and libraries too (~110-130 MiB before any query).

How a worker keeps it: :mod:`squall.operators.memory`.
"""

from __future__ import annotations

import os
from pathlib import Path

from squall.errors import OptionError
from squall.operators.memory import human_bytes

#: of the machine's memory, what Squall's processes (driver and workers) share on the local platform
LOCAL_SHARE = 0.8
#: the least budget a worker can run a stage with (the interpreter and the libraries alone take ~130 MiB)
MIN_WORKER_BYTES = 192 << 20

_CGROUP_MAX = Path("/sys/fs/cgroup/memory.max")


def machine_memory() -> int:
    """Bytes of memory this machine (or its cgroup, when limited) gives the process."""
    try:
        text = _CGROUP_MAX.read_text().strip()
    except OSError:
        text = ""
    limited = int(text) if text.isdigit() else 0  # "max": no limit
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min(limited, total) if limited else total


#: the most the driver keeps for itself of the local share (planning, footers, the result on its way out): it
#: runs no stage, so past this its even share is the workers'
DRIVER_BYTES = 1 << 30


def local_worker_budget(processes: int, total: int | None = None) -> int:
    """The budget of each of ``processes`` local worker processes when they and the driver share
    :data:`LOCAL_SHARE` of ``total`` bytes (default: :func:`machine_memory`): the driver keeps an even share of
    it, at most :data:`DRIVER_BYTES`, and the workers split the rest evenly."""
    whole = int((total if total is not None else machine_memory()) * LOCAL_SHARE)
    processes = max(1, processes)
    driver = min(whole // (processes + 1), DRIVER_BYTES)
    return max(MIN_WORKER_BYTES, (whole - driver) // processes)


def check_budget(budget: int, label: str) -> int:
    """``budget`` when a worker can run with it; OptionError naming ``label`` (the option that set it) else."""
    if budget < MIN_WORKER_BYTES:
        raise OptionError(
            f"{label} must be at least {human_bytes(MIN_WORKER_BYTES)} (the worker's interpreter and libraries "
            f"alone take ~130 MiB), got {human_bytes(budget)}"
        )
    return budget


#: what a Lambda execution environment holds outside the worker's Python process (the runtime's bootstrap and
#: its client), MB
LAMBDA_RESERVE_MB = 64


def lambda_worker_budget_mb(function_mb: int) -> int:
    """The memory one Lambda worker may use at its peak: the function's ``function_mb`` minus
    :data:`LAMBDA_RESERVE_MB` (never below 0)."""
    return max(0, int(function_mb) - LAMBDA_RESERVE_MB)
