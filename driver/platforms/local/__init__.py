"""The ``local`` platform: W warm worker processes on this machine (the embedded default).

- :mod:`~squall.driver.platforms.local.platform` — :class:`LocalPlatform`, the driver side (pool, messages,
  failures, clean-up);
- :mod:`~squall.driver.platforms.local.worker_process` — the worker program
  (``python -m squall.driver.platforms.local.worker_process``): one rank per query, until told to stop.

May import: :mod:`squall.driver.platforms.base`, :mod:`squall.plan`, :mod:`squall.errors`,
:mod:`squall.exchange` and :mod:`squall.operators` (the worker side).
"""
