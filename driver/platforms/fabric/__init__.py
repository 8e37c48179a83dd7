"""The ``fabric`` platform: the local platform's worker processes, exchanging over libfabric (RDMA).

- :mod:`~squall.driver.platforms.fabric.platform` — :class:`FabricPlatform`: ranks started on this machine
  or by a cluster launcher (mpirun, srun);
- :mod:`~squall.driver.platforms.fabric.worker_process` — the rank program a cluster launcher starts
  (``python -m squall.driver.platforms.fabric.worker_process --connect HOST:PORT``).

May import: :mod:`squall.driver.platforms.base`, :mod:`squall.driver.platforms.local` (it builds on it),
:mod:`squall.errors` and :mod:`squall.exchange.fabric` (whose native part loads only when used).
"""
