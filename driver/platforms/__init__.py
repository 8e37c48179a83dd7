"""Platforms: where a plan's W workers run, one subpackage per platform with its worker-side entry point.

- :mod:`~squall.driver.platforms.base` — the :class:`Platform` interface (lifecycle and capabilities),
  :class:`Progress`, :class:`Execution` and the :data:`PLATFORMS` registry (name → class, imported lazily);
- :mod:`~squall.driver.platforms.local` — ``local``: a warm pool of worker processes on this machine;
- :mod:`~squall.driver.platforms.fabric` — ``fabric``: the same processes exchanging over libfabric,
  started locally or by a cluster launcher;
- :mod:`~squall.driver.platforms.lambda_` — ``lambda`` and ``lambda-local``: AWS Lambda invocations (or
  the local emulator) exchanging through S3;
- :mod:`~squall.driver.platforms.prices` — AWS list prices (Lambda GB-seconds and requests, S3 requests)
  and :func:`~squall.driver.platforms.prices.query_cost`: what a Lambda query cost (its stats) and what
  the scale model forecasts it to cost (:mod:`squall.driver.forecast.scale`);
- :mod:`~squall.driver.platforms.memory` — the memory budget of a worker (what one rank may use at its peak):
  on Lambda, the function's memory minus the runtime's share.

May import: :mod:`squall.plan`, :mod:`squall.errors`, :mod:`squall.registry`, :mod:`squall.aws`,
:mod:`squall.operators`, :mod:`squall.exchange` and the driver's stages below it (the planner and down);
never :mod:`squall.driver.forecast` (which models the platforms and imports them), the report or
:mod:`squall.driver.compile`, nor the SDK (:mod:`squall.connection`), the service or
:mod:`squall.functions`. A platform subpackage imports ``base``, ``prices`` and its own modules;
``fabric`` builds on ``local``.
"""
