"""Process-level safety of the local platform: Ctrl-C and SIGTERM never leave workers or files behind.

- :func:`deferred_sigint`: holds SIGINT back while a message is sent to or read from a worker (a
  message is never half sent or half read), then delivers it; the block sees whether one came.
- :func:`track`: the platforms with a started pool. At interpreter exit they are closed; on SIGTERM or
  SIGHUP (when the process has no handler of its own) their workers are killed and their listener,
  running query's exchange folder and result file and worker logs are removed before the process dies
  of the signal as it would have without Squall.
- :func:`process_root`, :func:`sweep_orphans`: a driver keeps its queries' exchange folders and result files
  under a folder named after its pid; what a driver killed with SIGKILL left there (and its listener folder,
  its empty worker logs) is removed by the next driver that starts a pool.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import tempfile
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from squall.exchange.local import default_root


class _Killable(Protocol):
    def close(self) -> None: ...

    def kill(self) -> None: ...


_live: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_atexit_registered = False
_signals_installed = False
_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def deferred_sigint() -> Iterator[list[int]]:
    """SIGINT arriving inside the block is delivered when it ends (main thread only; a no-op elsewhere).

    The list yielded gets an entry per SIGINT held back, so a loop inside can stop early.
    """
    held: list[int] = []
    previous = signal.getsignal(signal.SIGINT) if _main_thread() else None
    if not callable(previous):  # SIG_IGN, SIG_DFL, not the main thread: nothing to defer
        yield held
        return

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    try:
        signal.signal(signal.SIGINT, hold)
    except ValueError:  # not the main interpreter
        yield held
        return
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            previous(signal.SIGINT, None)


def track(platform: _Killable) -> None:
    """Close ``platform`` at exit and kill its workers on SIGTERM/SIGHUP (see module doc)."""
    global _atexit_registered, _signals_installed
    _live.add(platform)
    with _lock:
        if not _atexit_registered:
            atexit.register(_close_all)
            _atexit_registered = True
        if not _signals_installed and _main_thread():
            for sig in _SIGNALS:
                if signal.getsignal(sig) == signal.SIG_DFL:
                    signal.signal(sig, _on_signal)
            _signals_installed = True


def untrack(platform: _Killable) -> None:
    _live.discard(platform)


def _close_all() -> None:
    for platform in list(_live):
        try:
            platform.close()
        except Exception:
            pass


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    for platform in list(_live):
        try:
            platform.kill()
        except Exception:
            pass
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def process_root(pid: int | None = None) -> Path:
    """This driver's folder for exchange data and results under the local exchange root (``proc-<pid>``)."""
    return default_root() / f"proc-{pid or os.getpid()}"


def remove_process_root() -> None:
    """Remove this driver's folder if nothing is left in it (other platforms of the process may still use it)."""
    root = process_root()
    for folder in (root / "results", root):
        try:
            folder.rmdir()
        except OSError:  # not empty, or gone
            pass


_swept: list[bool] = []


def sweep_orphans(once: bool = True) -> list[str]:
    """Remove what drivers that died without cleaning up (SIGKILL) left behind: their ``proc-<pid>`` folders
    (exchange data, results), their listener folders (``<tmp>/squall-<pid>-*``), spill folders
    (``<tmp>/squall-<pid>-spill*``) and exchange files on disk (``<tmp>/squall-<pid>-exchange``) and their empty
    worker logs;
    returns what it removed. ``once``: only on the first call in this process."""
    if once and _swept:
        return []
    _swept.append(True)
    removed: list[str] = []
    root = default_root()
    for folder in root.glob("proc-*"):
        if _dead(folder.name.removeprefix("proc-")):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    for folder in Path(tempfile.gettempdir()).glob("squall-*-*"):
        match = re.fullmatch(r"squall-(\d+)-(\w+)", folder.name)
        if not match or not folder.is_dir() or not _dead(match.group(1)):
            continue
        # its workers' spill folders and the exchange's files on disk go whole; a listener folder if it holds
        # nothing but its socket
        if match.group(2).startswith(("spill", "exchange")) or {p.name for p in folder.iterdir()} <= {
            "workers.sock"
        }:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    for log in (root / "logs").glob("worker-*-*.log"):
        pid = log.name.split("-")[1]
        if _dead(pid) and log.stat().st_size == 0:
            log.unlink(missing_ok=True)
            removed.append(str(log))
    return removed


def _dead(pid_text: str) -> bool:
    """``pid_text`` is the pid of a process that no longer runs (False when not a pid, or it runs)."""
    if not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # someone else's: running
        return False
    return False
