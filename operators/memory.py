"""How a worker keeps its memory budget (the budget itself: :mod:`squall.driver.platforms.memory`).

DuckDB gets :data:`DUCKDB_SHARE` of the budget past the runtime's (:data:`RUNTIME_BYTES`) as its
``memory_limit`` and spills past it to the worker's own temp folder, within ``max_temp_directory_size``
(:func:`sandbox_memory`); the rest of the budget is for what lives outside DuckDB (Arrow pieces of the exchange, the stage's inputs, the interpreter). A stage that cannot
fit even with spilling fails with a one-line :class:`~squall.errors.QueryRuntimeError` naming the stage, the
rank, the budget and what DuckDB asked for (:func:`budget_exceeded`). The worker measures its peak resident
memory (``VmHWM``, reset per query: :class:`PeakMemory`) and the most its spill folder held (:class:`SpillWatch`)
for ``stats``.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: what a worker process holds before any query: the interpreter, DuckDB, PyArrow and Squall loaded (~110 MiB)
RUNTIME_BYTES = 128 << 20
#: of a worker's budget past :data:`RUNTIME_BYTES`, DuckDB's ``memory_limit`` (the rest: Arrow data outside DuckDB)
DUCKDB_SHARE = 0.6
#: of the free disk under the temp folder, what DuckDB may spill: the workers that share the disk split it, the
#: rest is for the exchange's and the received inputs' files
SPILL_DISK_SHARE = 0.5


def spill_limit(temp_directory: str, sharers: int = 1) -> int:
    """Bytes one of ``sharers`` workers spilling under ``temp_directory`` may spill: their even split of
    :data:`SPILL_DISK_SHARE` of the disk free there now (at least 1 GiB)."""
    free = shutil.disk_usage(temp_directory).free
    return max(1 << 30, int(free * SPILL_DISK_SHARE) // max(1, sharers))


def sandbox_memory(budget: int, temp_directory: str, spill_bytes: int | None = None) -> dict[str, Any]:
    """The Sandbox options that keep a worker within ``budget`` bytes, spilling at most ``spill_bytes`` (default
    :func:`spill_limit` of ``temp_directory`` for one worker) to ``temp_directory``. Options that stay the same
    from query to query keep the worker's DuckDB instance (so the local platform fixes ``spill_bytes`` per pool)."""
    spill = spill_bytes if spill_bytes is not None else spill_limit(temp_directory)
    return {
        "memory_limit": f"{duckdb_limit(budget) >> 20}MiB",
        "temp_directory": temp_directory,
        "max_temp_directory_size": f"{spill >> 20}MiB",
    }


def duckdb_limit(budget: int) -> int:
    """DuckDB's ``memory_limit`` in a worker of ``budget`` bytes (at least 64 MiB)."""
    return max(64 << 20, int((budget - RUNTIME_BYTES) * DUCKDB_SHARE))


class PeakMemory:
    """This process's peak resident memory since :meth:`reset` (Linux ``VmHWM``; reset through ``clear_refs``)."""

    def reset(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:  # not Linux, or not allowed: the peak is the process's since it started
            pass

    def peak(self) -> int:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0


def folder_bytes(path: str) -> int:
    """Bytes of the files directly in ``path`` (a spill folder), 0 when it is gone."""
    total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    except OSError:
        return 0
    return total


#: a worker past its budget stops its stage when the machine has less than this share of its memory left
MACHINE_RESERVE = 0.05


def resident_bytes() -> int:
    """This process's resident memory now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def machine_short() -> bool:
    """Whether the machine has less than :data:`MACHINE_RESERVE` of its memory available."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        total, available = (int(info[k].split()[0]) for k in ("MemTotal", "MemAvailable"))
    except (OSError, KeyError, ValueError):
        return False
    return available < MACHINE_RESERVE * total


class SpillWatch:
    """The most bytes a spill folder held while the block ran (sampled every ``every_s`` seconds on a thread of
    its own, and once at the end). With a ``budget`` and a ``stop`` (DuckDB's interrupt) it also guards the
    machine: a worker past its budget while the machine runs out of memory (:func:`machine_short`) is stopped
    (``over`` holds what it held), so that the stage fails in one line rather than the kernel stalling or
    killing processes."""

    def __init__(
        self,
        folder: str | None,
        every_s: float = 0.05,
        budget: int | None = None,
        stop: Callable[[], None] | None = None,
    ) -> None:
        self.folder, self.every_s, self.most = folder, every_s, 0
        self.budget, self.stop, self.over = budget, stop, 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        assert self.folder is not None
        self.most = max(self.most, folder_bytes(self.folder))
        if (
            self.budget
            and self.stop is not None
            and (held := resident_bytes()) > self.budget
            and machine_short()
        ):
            self.over = max(self.over, held)
            self.stop()

    def _watch(self) -> None:
        while not self._done.wait(self.every_s):
            self._sample()

    def __enter__(self) -> SpillWatch:
        if self.folder:
            self._thread = threading.Thread(target=self._watch, name="squall-spill-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._done.set()
            self._thread.join()
            self._sample()


_DUCK_OOM = re.compile(r"Out of Memory Error:\s*([^\n]*)")


def budget_exceeded(err: BaseException, stage: int, rank: int, budget: int | None) -> str:
    """The one-line message of a stage that ran out of memory within ``budget`` bytes (None: no budget set)."""
    found = _DUCK_OOM.search(str(err))
    what = found.group(1).strip() if found else str(err).splitlines()[0] if str(err) else type(err).__name__
    within = f"its memory budget of {human_bytes(budget)}" if budget else "the memory it was given"
    return (
        f"stage {stage} on rank {rank} needs more memory than {within}, even spilling to disk (DuckDB: {what}); "
        "give each worker more memory (--worker-memory / worker_memory=) or use more workers"
    )


def machine_out_of_memory(stage: int, rank: int, budget: int, held: int) -> str:
    """The one-line message of a stage stopped past its budget while the machine ran out of memory."""
    return (
        f"stage {stage} on rank {rank} held {human_bytes(held)}, past its memory budget of {human_bytes(budget)}, "
        "while the machine ran out of memory, and was stopped; give each worker more memory (--worker-memory / "
        "worker_memory=), use fewer workers per machine, or run it where there is more memory"
    )


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` says a disk is full (Python's ENOSPC, or Arrow's or DuckDB's "No space left on device")."""
    return getattr(err, "errno", None) == errno.ENOSPC or "No space left on device" in str(err)


def out_of_disk(stage: int, rank: int, folder: str) -> str:
    """The one-line message of a stage whose spill or exchange files filled the disk."""
    return (
        f"stage {stage} on rank {rank} filled the disk it spills to ({folder}) and the exchange's files: free disk "
        "space there (or set TMPDIR to a larger disk), or give each worker more memory (--worker-memory / "
        "worker_memory=)"
    )


def spill_full(err: BaseException) -> bool:
    """Whether DuckDB stopped because its spill folder reached ``max_temp_directory_size`` (it could not offload a
    block), not because the memory it was given was too little."""
    return "failed to offload" in str(err) or "max_temp_directory_size" in str(err)


def out_of_spill(stage: int, rank: int, folder: str, limit: str) -> str:
    """The one-line message of a stage whose spilling reached the worker's share of the disk (``limit``)."""
    return (
        f"stage {stage} on rank {rank} spilled all its share of the disk ({limit} in {folder}: half the disk free "
        "when the pool started, split among its workers) and needs more: free disk space there (or set TMPDIR to a "
        "larger disk), give each worker more memory (--worker-memory / worker_memory=), or use fewer workers"
    )


def human_bytes(n: float) -> str:
    """``n`` bytes as text in binary units: ``512 MB``, ``1.5 GB``, ``900 KB``."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB".replace(".0 GiB", " GiB")
    if n >= 1 << 20:
        return f"{n / (1 << 20):.0f} MiB"
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n:.0f} B"
