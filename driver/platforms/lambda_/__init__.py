"""The ``lambda`` and ``lambda-local`` platforms: ranks as AWS Lambda invocations exchanging through S3.

Driver side:

- :mod:`~squall.driver.platforms.lambda_.platform` — :class:`LambdaPlatform` (boto3's Lambda client) and
  :class:`LocalLambdaPlatform` (the emulator): one query's lifecycle;
- :mod:`~squall.driver.platforms.lambda_.run` — the attempts of every rank, read from the status keys;
- :mod:`~squall.driver.platforms.lambda_.retries` — dead ranks re-invoked, stragglers duplicated;
- :mod:`~squall.driver.platforms.lambda_.summary` — the ``lambda`` stats and the query's cost;
- :mod:`~squall.driver.platforms.lambda_.init_errors` — a handler module that cannot load: the silent-start
  probe and Lambda's init-error payload as the query's one-line error;
- :mod:`~squall.driver.platforms.lambda_.emulator` — :class:`LocalLambda`, boto3's ``invoke`` running the
  real handler in local processes (:mod:`~squall.driver.platforms.lambda_.emulator_process`).

Shared by the driver and the workers: :mod:`~squall.driver.platforms.lambda_.tree` (invocation tree)
and :mod:`~squall.driver.platforms.lambda_.state` (the run's S3 keys). Worker side:
:mod:`~squall.driver.platforms.lambda_.worker` (one invocation, behind ``squall.functions.worker``).

May import: :mod:`squall.driver.platforms.base`, :mod:`squall.driver.platforms.prices`, :mod:`squall.plan`,
:mod:`squall.errors`, :mod:`squall.aws`, :mod:`squall.exchange` and :mod:`squall.operators` (the worker
side); boto3 only through :mod:`squall.aws` or lazily. Never the SDK or the service.
"""
