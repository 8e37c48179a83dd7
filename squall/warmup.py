"""One-time costs of a process's first query, paid ahead of it where the process would otherwise wait.

pyarrow imports pandas, when it is installed, the first time it converts Python or NumPy values (an empty
table for a type, ``pa.array`` of a NumPy array): ~0.2 s, met by the driver in its first bind and by a
worker in its first partitioned stage. The driver's DuckDB instance it plans with, and the list of DuckDB's
aggregate functions, are made by the first query too (~50 ms).

- A :class:`~squall.connection.Connection` starts :func:`start_driver_warmup` when it opens: a user connects,
  then writes or sends the first query; those are made meanwhile. A query sent at once waits for the
  same import it would have made (Python's import lock) or makes its own, never more.
- A local worker calls :func:`warm_conversions` when idle after its first query (as it makes spare DuckDB
  instances, operators/duck.py): never while the connection's first query is planned, which the CLI's single
  query would feel on a machine whose cores the workers share.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable


@functools.cache
def warm_conversions() -> None:
    """Make pyarrow's first conversion of NumPy values (it imports pandas when installed); once a process."""
    import numpy as np
    import pyarrow as pa

    pa.array(np.zeros(1, dtype=np.int64))


def start_driver_warmup(also: Callable[[], None]) -> threading.Thread:
    """Run :func:`warm_conversions`, then ``also`` (the connection's: its planning instance and aggregates), on a
    new thread (not a daemon: an interpreter exiting waits for it instead of tearing modules down under it)."""
    thread = threading.Thread(target=_quietly, args=(warm_conversions, also), name="squall-warmup")
    thread.start()
    return thread


def _quietly(*work: Callable[[], None]) -> None:
    for step in work:
        try:
            step()
        except Exception:  # an optimisation: the query that needs the same meets any error itself
            return
