"""Process-level safety of the local platform: Ctrl-C and SIGTERM never leave workers or files behind.

- :func:`deferred_sigint`: holds SIGINT back while a message is sent to or read from a worker (a
  message is never half sent or half read), then delivers it; the block sees whether one came.
- :func:`track`: the platforms with a started pool. At interpreter exit they are closed; on SIGTERM or
  SIGHUP (when the process has no handler of its own) their workers are killed and their listener,
  running query's exchange folder and result file and worker logs are removed before the process dies
  of the signal as it would have without Squall.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Protocol


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
