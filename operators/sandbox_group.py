"""The local files a worker process lets one connection's queries read: all that connection's earlier queries
on this process were given, so its next query finds the kept DuckDB instance (operators/duck.py) ready.

A worker's sandbox allows exactly the files its query's scans read (``allowed_paths``), and a locked instance
cannot widen them: each new set of files meant a new DuckDB instance, ~15-30 ms on the first run of every
query. A *sandbox group* is one connection (its platform names it, :class:`LocalPlatform`'s
``sandbox_group``): its queries' sandboxes allow the union of the files its queries on this process have read,
so after the first queries over its tables every query reuses one instance. Nothing outside what the
connection's own queries were given becomes readable, and stage SQL names no file (the frontend refuses table
functions): the allowed list stays a second fence, around the connection's tables instead of one query's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

#: groups remembered per process (the least recently used go first) and files per group (past it, a query
#: allows its own files only)
GROUPS_KEPT = 8
FILES_PER_GROUP = 4096

_files: OrderedDict[str, frozenset[str]] = OrderedDict()
_lock = threading.Lock()


def allowed_files(group: str, files: Iterable[str]) -> list[str]:
    """The files a query of ``group`` that reads ``files`` may be allowed: ``files`` and every file earlier
    queries of ``group`` on this process were allowed (sorted; ``files`` alone when ``group`` is empty or
    the union would pass :data:`FILES_PER_GROUP`)."""
    own = frozenset(files)
    if not group:
        return sorted(own)
    with _lock:
        union = _files.pop(group, frozenset()) | own
        if len(union) > FILES_PER_GROUP:
            union = own
        _files[group] = union
        while len(_files) > GROUPS_KEPT:
            _files.popitem(last=False)
    return sorted(union)
