"""Forecasts: what a plan will cost and how long it will take before it runs, and the W to run it at.

- :mod:`.scale` — the scale model: a SimPy simulation of a plan's stages and exchanges on AWS Lambda at
  any W (time, cost, S3 requests per exchange), with its profiles, request formulas and calibration;
- :mod:`.predict` — the model applied to a platform: which profile prices a plan, the :class:`Estimator`
  that simulates each (plan, configuration) once for ``explain --estimate`` and the query stats, and
  ``workers="auto"`` (the cheapest W within 10 % of the fastest on Lambda, the machine's cores on a warm
  local pool).

Forecast models the platforms, so it sits above them: the Lambda invocation tree
(:mod:`squall.driver.platforms.lambda_.tree`) and the price table (:mod:`squall.driver.platforms.prices`)
are theirs, and a Lambda run and its forecast are priced alike.

May import: :mod:`squall.driver.platforms`, the stages below them and :mod:`squall.driver.options`, and
:mod:`squall.plan`; never :mod:`squall.driver.report` (a sibling: neither imports the other) or
:mod:`squall.driver.compile`, nor the SDK or the service, which import this (``squall.connection`` for
``stats["estimate"]`` and ``workers="auto"``, the service's runner for ``explain --estimate``).
"""
