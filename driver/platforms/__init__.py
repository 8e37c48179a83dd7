"""Platforms: where a plan's W workers run, one subpackage per platform with its worker-side entry point.

- :mod:`~squall.driver.platforms.base` — the :class:`Platform` interface (lifecycle and capabilities),
  :class:`Progress`, :class:`Execution` and the :data:`PLATFORMS` registry (name → class, imported lazily);
- :mod:`~squall.driver.platforms.local` — ``local``: a warm pool of worker processes on this machine;
- :mod:`~squall.driver.platforms.fabric` — ``fabric``: the same processes exchanging over libfabric,
  started locally or by a cluster launcher;
- :mod:`~squall.driver.platforms.lambda_` — ``lambda`` and ``lambda-local``: AWS Lambda invocations (or
  the local emulator) exchanging through S3.

May import: :mod:`squall.plan`, :mod:`squall.errors`, :mod:`squall.registry`, :mod:`squall.aws`,
:mod:`squall.operators`, :mod:`squall.exchange` and the rest of :mod:`squall.driver` (cost); never the
SDK (:mod:`squall.connection`), the service or :mod:`squall.functions`. A platform subpackage imports
``base`` and its own modules; ``fabric`` builds on ``local``.
"""
