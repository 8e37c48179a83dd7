"""The DuckDB sandboxes one rank runs a query's stages in: one per thread count its stages take.

A local query's W ranks share one machine's cores, each rank with its share (``threads``: cores // W). A stage
that runs on fewer ranks than that (a one-rank tail: the gathered final aggregate, a window over it, the final
sort and LIMIT) would leave the waiting ranks' cores idle; given the machine's ``cores``, it takes
``cores // its ranks`` threads instead. A locked DuckDB instance cannot change its threads, so such a stage runs
in a second sandbox of that thread count: the same files, views and memory settings, a kept instance like the
first (operators/duck.py), opened the first time a stage of this query needs it. Without ``cores`` (Lambda:
each rank has its own vCPUs; a launcher's cluster, whose ranks per host are unknown) every stage takes
``threads``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any

from squall.operators.duck import Sandbox


class StageSandboxes:
    """A rank's sandboxes for one query, by thread count:
    ``with StageSandboxes(...) as s: db = s.sandbox(s.threads_for(len(stage.ranks), world_size))``."""

    def __init__(self, threads: int, cores: int | None = None, **sandbox: Any) -> None:
        """``threads``: a stage on every rank's; ``cores``: what the ranks share (None: nothing to lend);
        ``sandbox``: the :class:`Sandbox` arguments besides ``threads``, the same for every thread count."""
        self.threads = threads
        self.cores = cores
        self._sandbox = sandbox
        self._open: dict[int, Sandbox] = {}
        self._lock = threading.Lock()  # interrupt() comes from watch threads
        self._stack = ExitStack()

    def threads_for(self, ranks: int, world_size: int) -> int:
        """The DuckDB threads of a stage on ``ranks`` of ``world_size`` ranks: the idle ranks' cores lent to it."""
        if self.cores is None or ranks >= world_size:
            return self.threads
        return max(self.threads, self.cores // max(ranks, 1))

    def sandbox(self, threads: int) -> Sandbox:
        """The sandbox of ``threads`` DuckDB threads (opened on first use, closed with this object)."""
        with self._lock:
            found = self._open.get(threads)
        if found is None:
            found = self._stack.enter_context(Sandbox(threads=threads, **self._sandbox))
            with self._lock:
                self._open[threads] = found
        return found

    def interrupt(self) -> None:
        """Interrupt whatever statement each open sandbox runs (a cancel, the machine out of memory)."""
        with self._lock:
            opened = list(self._open.values())
        for db in opened:
            db.con.interrupt()

    def __enter__(self) -> StageSandboxes:
        self.sandbox(self.threads)  # the rank's own share: opened up front, as its one sandbox always was
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        return self._stack.__exit__(*exc)  # each Sandbox sees the error (an instance DuckDB invalidated goes)
