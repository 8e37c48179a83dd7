"""What a stopped server leaves behind, found and cleared when ``squall serve`` starts.

**Queries.** Every query a server accepts carries its owner in ``status.json`` (``server``: host, boot id, pid
and the process's start time, :func:`owner_stamp`). A query still ``queued`` or ``running`` whose owner is a
process of this machine that no longer exists (a SIGKILL, a crash, a reboot) will never finish: it is marked
``failed`` with ``ServerStopped`` (:func:`fail_stopped`), at start and whenever its status is read. Queries of
other machines (a shared S3 state) are left alone; queries without an owner (written before owners were
recorded) count as stopped only in a local state folder, which one server at a time uses.

**Folders.** The local platform and exchange name what they leave on disk after the process that made them
(:func:`remove_orphans`): the workers' listener folder ``$TMPDIR/squall-<pid>-*``, the worker logs
``<root>/logs/worker-<pid>-<rank>-*.log`` and a query's exchange folder ``<root>/<query id>/`` (its ``.owner``
file holds the pid; its result files ``<root>/results/<query id>-*`` go with it), where ``<root>`` is
:func:`squall.exchange.local.default_root` (``/dev/shm/squall``). Only what belongs to a process that is gone is
removed, never another live server's.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from squall.exchange.local import OWNER_FILE, default_root
from squall.service import records
from squall.service.state import StateStore

log = logging.getLogger("squall.service")

#: the ``error`` of a query whose server stopped before it finished
STOPPED = "ServerStopped"
STOPPED_DETAIL = "the server stopped before the query finished (it was not restarted); submit it again"

_LISTENER = re.compile(r"^squall-(\d+)-[A-Za-z0-9_]+$")
_WORKER_LOG = re.compile(r"^worker-(\d+)-\d+-[0-9a-f]+\.log$")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat``); None when unknown."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(text[text.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


_OWN_STAMPS: dict[int, dict[str, Any]] = {}  # pid -> its stamp (read once: status requests ask often)


def owner_stamp() -> dict[str, Any]:
    """This process as the owner of the queries it runs: ``{host, boot, pid, start}``."""
    pid = os.getpid()
    stamp = _OWN_STAMPS.get(pid)
    if stamp is None:
        stamp = {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid, "start": _start_ticks(pid)}
        _OWN_STAMPS[pid] = stamp
    return dict(stamp)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(owner: Any) -> bool | None:
    """Whether the owner of a query still runs: True, False, or None when this machine cannot tell (another
    host, or no owner recorded)."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return None
    if owner == owner_stamp():  # this process
        return True
    if owner.get("host") != socket.gethostname():
        return None
    boot = _boot_id()
    if boot and owner.get("boot") and owner["boot"] != boot:
        return False  # the machine restarted since
    pid = int(owner["pid"])
    if not pid_alive(pid):
        return False
    start = owner.get("start")
    return start is None or _start_ticks(pid) in (None, start)  # a reused pid started at another time


def stopped(doc: dict[str, Any], *, unowned_stopped: bool = False) -> bool:
    """Whether the query of status ``doc`` is queued or running for a server that no longer runs."""
    if doc.get("status") in records.TERMINAL:
        return False
    alive = owner_alive(doc.get("server"))
    if alive is None:
        return unowned_stopped and "server" not in doc
    return not alive


def fail_stopped(store: StateStore, query_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Mark the query failed because its server stopped; returns the new status document."""
    failed = dict(doc)
    failed.update(
        status="failed",
        finished_at=time.time(),
        error={"error": STOPPED, "detail": STOPPED_DETAIL},
    )
    failed.pop("queue", None)
    store.put_json(records.status_key(query_id), failed)
    return failed


def fail_all_stopped(store: StateStore, *, unowned_stopped: bool) -> list[str]:
    """Mark every query of ``store`` left queued or running by a stopped server as failed; their ids."""
    failed = []
    for name in store.children(""):
        if not records.valid_query_id(name):
            continue
        try:
            doc = store.get_json(records.status_key(name))
            if doc is None and unowned_stopped:  # accepted, then the server stopped before it wrote a status
                request = store.get_json(records.request_key(name))
                doc = {"query_id": name, "status": "queued", **request} if isinstance(request, dict) else None
            if isinstance(doc, dict) and stopped(doc, unowned_stopped=unowned_stopped):
                fail_stopped(store, name, doc)
                failed.append(name)
        except Exception:  # one unreadable query must not stop the server from starting
            log.warning("cannot check query %s", name, exc_info=True)
    return failed


def _owner_pid(folder: Path) -> int | None:
    try:
        return int((folder / OWNER_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _remove(path: Path, removed: list[str]) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    if not path.exists():
        removed.append(str(path))


def remove_orphans(temp: Path | None = None, root: Path | None = None) -> list[str]:
    """Remove the folders and files of local platforms and exchanges whose process is gone (see module doc);
    the paths removed."""
    temp = Path(temp or tempfile.gettempdir())
    root = Path(root or default_root())
    removed: list[str] = []
    for path in _entries(temp):
        match = _LISTENER.match(path.name)
        if match and path.is_dir() and not pid_alive(int(match.group(1))):
            _remove(path, removed)
    for path in _entries(root / "logs"):
        match = _WORKER_LOG.match(path.name)
        if match and not pid_alive(int(match.group(1))):
            _remove(path, removed)
    for path in _entries(root):
        if path.name in ("logs", "results") or not path.is_dir():
            continue
        pid = _owner_pid(path)
        if pid is not None and not pid_alive(pid):
            for result in _entries(root / "results"):
                if result.name.startswith(f"{path.name}-"):
                    _remove(result, removed)
            _remove(path, removed)
    return removed


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []
