"""The predicate cache (HRDBMS's predicate-based data skipping): which row groups matched no row.

For each Parquet file row group the cache remembers normalized scan predicates
(:mod:`squall.driver.skipping.predicates`) and whether any row passed them there; workers
report it for the row groups they read (``squall.operators.skip_record``). When a
scan is planned, a row group is skipped when a cached predicate that the scan's
predicate implies matched no row in it (``squall.driver.planner.skipping``).

Every entry carries its file's stamp (size and mtime, or size and ETag): an entry
whose file changed is dropped when it is next looked at, so a cached "no match"
never hides rows of a rewritten file. Bounded: least recently used entries go first
when there are more than ``max_entries`` or they hold more than ``max_bytes``.
Optionally persisted to a JSON file (``path``), loaded at start and rewritten after
each query that taught it something.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from squall.driver.skipping.predicates import parse_key
from squall.errors import OptionError
from squall.plan import Plan, ScanInput

FORMAT = 1
_ENTRY_OVERHEAD = 64  # bytes counted per entry besides its texts


class PredicateCache:
    """Per (file, row group, predicate): did any row pass? Thread-safe (see module doc)."""

    def __init__(
        self, max_entries: int = 200_000, max_bytes: int = 64 << 20, path: str | None = None
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise OptionError("predicate cache: max_entries and max_bytes must be positive")
        self.max_entries = int(max_entries)
        self.max_bytes = int(max_bytes)
        self.path = path
        self._lock = threading.Lock()
        # (path, row group, predicate key) -> (stamp, matched nothing); order = least recently used first
        self._entries: OrderedDict[tuple[str, int, str], tuple[str, bool]] = OrderedDict()
        self._by_group: dict[tuple[str, int], set[str]] = {}
        self._bytes = 0
        self.generation = 0  # bumped when an entry is added, changed or dropped for a changed file
        self.evicted = 0
        self.invalidated = 0
        if path and os.path.exists(path):
            self._load(path)

    # --- lookups --------------------------------------------------------------------------------

    def lookup(self, path: str, row_group: int, stamp: str, key: str) -> str | None:
        """``"empty"`` when a cached predicate implied by ``key`` matched no row in this row group,
        ``"matched"`` when one implying ``key`` matched some row, else None (unknown)."""
        if not stamp:
            return None
        want = parse_key(key)
        outcome: str | None = None
        with self._lock:
            for cached in list(self._by_group.get((path, row_group), ())):
                entry_key = (path, row_group, cached)
                cached_stamp, empty = self._entries[entry_key]
                if cached_stamp != stamp:  # the file changed: the entry no longer describes it
                    self._drop(entry_key)
                    self.invalidated += 1
                    self.generation += 1
                    continue
                if empty and (cached == key or want.implies(parse_key(cached))):
                    self._entries.move_to_end(entry_key)
                    return "empty"
                if not empty and outcome is None and (cached == key or parse_key(cached).implies(want)):
                    self._entries.move_to_end(entry_key)
                    outcome = "matched"
        return outcome

    # --- learning -------------------------------------------------------------------------------

    def record(self, path: str, row_group: int, stamp: str, key: str, empty: bool) -> None:
        """Remember whether predicate ``key`` matched any row of one row group of a file at ``stamp``."""
        if not stamp:
            return
        entry_key = (path, row_group, key)
        with self._lock:
            old = self._entries.get(entry_key)
            if old is not None:
                self._drop(entry_key)
            self._entries[entry_key] = (stamp, empty)
            self._by_group.setdefault((path, row_group), set()).add(key)
            self._bytes += _size(entry_key, stamp)
            if old != (stamp, empty):
                self.generation += 1
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
                self.evicted += 1

    def learn(self, plan: Plan, reports: Iterable[dict[str, Any]]) -> int:
        """Store what the workers recorded for the plan's probed scans; returns the entries learned."""
        scans = {
            inp.name: inp
            for stage in plan.stages
            for inp in stage.inputs
            if isinstance(inp, ScanInput) and inp.skipping is not None and inp.skipping.probe
        }
        learned = 0
        for report in reports:
            for name, outcome in (report.get("skipping") or {}).items():
                inp = scans.get(name)
                if inp is None or inp.skipping is None:
                    continue
                stamps = {(p[0], p[1]): p[4] for p in inp.skipping.probe}
                for kind, empty in (("empty", True), ("matched", False)):
                    for path, rg in outcome.get(kind, ()):
                        stamp = stamps.get((path, int(rg)))
                        if stamp:
                            self.record(path, int(rg), stamp, inp.skipping.predicate, empty)
                            learned += 1
        if learned and self.path:
            self.save(self.path)
        return learned

    def settled(self, plan: Plan) -> Plan | None:
        """``plan`` as planning it again now would make it, when that differs only in its probes: each probed
        row group the cache knows an outcome of no longer probed (and a scan with none left probes nothing).
        None when one of them is known empty: planning again skips it, which takes the planner.

        A query whose probes all matched is then run again from the plan cache, not planned again: a matched
        row group is read either way, and the planner uses the outcome for nothing else."""
        settled: dict[str, ScanInput] = {}
        for stage in plan.stages:
            for inp in stage.inputs:
                if not isinstance(inp, ScanInput) or inp.skipping is None or not inp.skipping.probe:
                    continue
                key = inp.skipping.predicate
                unknown = []
                for probed in inp.skipping.probe:
                    outcome = self.lookup(probed[0], probed[1], probed[4], key)
                    if outcome == "empty":
                        return None
                    if outcome is None:
                        unknown.append(probed)
                if len(unknown) < len(inp.skipping.probe):
                    skipping = replace(
                        inp.skipping,
                        probe=tuple(unknown),
                        probe_sql=inp.skipping.probe_sql if unknown else "",
                    )
                    settled[inp.name] = replace(inp, skipping=skipping)
        if not settled:
            return plan
        stages = tuple(
            replace(stage, inputs=tuple(settled.get(i.name, i) for i in stage.inputs))
            if any(i.name in settled for i in stage.inputs)
            else stage
            for stage in plan.stages
        )
        return replace(plan, stages=stages)

    # --- size, persistence ----------------------------------------------------------------------

    def info(self) -> dict[str, int]:
        """Entries, bytes, evictions and invalidations so far (for stats)."""
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self._bytes,
                "evicted": self.evicted,
                "invalidated": self.invalidated,
            }

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def save(self, path: str) -> None:
        """Write every entry (least recently used first) to a JSON file, atomically."""
        with self._lock:
            rows = [[p, rg, stamp, key, empty] for (p, rg, key), (stamp, empty) in self._entries.items()]
        doc = {"format": FORMAT, "entries": rows}
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".predicate-cache-", dir=folder)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)

    def _load(self, path: str) -> None:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return  # unreadable: start empty (the cache is only a hint)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            return
        for p, rg, stamp, key, empty in doc.get("entries", []):
            self.record(str(p), int(rg), str(stamp), str(key), bool(empty))

    def _drop(self, entry_key: tuple[str, int, str]) -> None:
        """Remove one entry; the lock is held."""
        stamp, _empty = self._entries.pop(entry_key)
        self._bytes -= _size(entry_key, stamp)
        group = self._by_group.get(entry_key[:2])
        if group is not None:
            group.discard(entry_key[2])
            if not group:
                del self._by_group[entry_key[:2]]


def _size(entry_key: tuple[str, int, str], stamp: str) -> int:
    return len(entry_key[0]) + len(entry_key[2]) + len(stamp) + _ENTRY_OVERHEAD
