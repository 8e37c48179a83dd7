"""Parquet footers of many files: read in parallel, cached in the process by (path, size, stamp).

A table of many small files costs one footer read per file the first time it is planned; :func:`read_footers`
issues them on a pool of threads (local files and object stores alike: S3 ranged GETs overlap), and keeps
each footer under its file's (path, size, stamp) — the stamp is the listing's size and mtime, or size and
ETag — so a later query, or another table over the same files, reads none again while the file is
unchanged. A file listed without a stamp is read every time (its change could not be seen).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq

from squall.operators.storage import FileEntry, Storage

#: footers kept in the process (least recently used dropped first; a footer is a few to tens of KB)
CACHE_ENTRIES = 20_000
#: threads reading footers at once (object stores: requests in flight; local files parse under the GIL, where
#: a few threads already overlap the reads)
THREADS = {"file": 4}
DEFAULT_THREADS = 16

_lock = threading.Lock()
_cache: OrderedDict[tuple[str, int, str], pq.FileMetaData] = OrderedDict()


def _key(entry: FileEntry) -> tuple[str, int, str] | None:
    return (entry.path, entry.size, entry.stamp) if entry.stamp else None


def cached(entry: FileEntry) -> pq.FileMetaData | None:
    """The cached footer of ``entry``'s file as listed, or None."""
    key = _key(entry)
    if key is None:
        return None
    with _lock:
        md = _cache.get(key)
        if md is not None:
            _cache.move_to_end(key)
        return md


def _keep(entry: FileEntry, md: pq.FileMetaData) -> None:
    key = _key(entry)
    if key is None:
        return
    with _lock:
        _cache[key] = md
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)


def read_footers(storage: Storage, entries: Sequence[FileEntry]) -> list[pq.FileMetaData]:
    """The footers of ``entries``' files, in order: cached ones as kept, the others read in parallel
    (a DataError of any file is raised)."""
    out: list[pq.FileMetaData | None] = [cached(e) for e in entries]
    missing = [i for i, md in enumerate(out) if md is None]
    if len(missing) == 1:
        out[missing[0]] = storage.read_metadata(entries[missing[0]].path)
    elif missing:
        threads = min(THREADS.get(storage.scheme, DEFAULT_THREADS), len(missing))
        with ThreadPoolExecutor(threads, thread_name_prefix="footers") as pool:
            for i, md in zip(missing, pool.map(lambda i: storage.read_metadata(entries[i].path), missing)):
                out[i] = md
    for i in missing:
        md = out[i]
        assert md is not None
        _keep(entries[i], md)
    return [md for md in out if md is not None]


def clear_cache() -> None:
    """Forget every cached footer (benchmarks measure cold planning with it)."""
    with _lock:
        _cache.clear()
