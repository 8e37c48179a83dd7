"""The memory budget of a worker: what one rank may use at its peak.

- Lambda: the function's memory (``memory_mb`` of the platform's settings, ``SQUALL_WORKER_MEMORY_MB`` when
  deployed) minus :data:`RUNTIME_MB` for the interpreter and the libraries it has loaded (DuckDB,
  pyarrow): :func:`lambda_worker_budget_mb`.

``explain --estimate`` prints both, the function's memory the scale model prices and the budget of a worker.
"""

from __future__ import annotations

#: what a Lambda worker's runtime holds before its first stage: the interpreter and the loaded libraries (MB)
RUNTIME_MB = 160


def lambda_worker_budget_mb(function_mb: int) -> int:
    """The memory one Lambda worker may use at its peak: the function's ``function_mb`` minus
    :data:`RUNTIME_MB` (never below 0)."""
    return max(0, int(function_mb) - RUNTIME_MB)
