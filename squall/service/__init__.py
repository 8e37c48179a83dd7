"""The query service: REST API (Powertools resolver), state stores, query runner and ``squall serve``.

Modules, bottom up:

- sizes and durations of settings and users files (``"16MB"``, ``"30m"``): :mod:`squall.sizes`;
- :mod:`~squall.service.users` — users (hashed tokens, IAM principals), roles, per-user limits and catalogs;
- :mod:`~squall.service.audit` — the audit trail: a JSON line per submitted and per ended query;
- :mod:`~squall.service.state` — where query state lives (``StateStore``: local folder or S3), by URL scheme;
- :mod:`~squall.service.runner` — runs one stored query on a Connection and records status, progress, result;
- :mod:`~squall.service.backend` — where queries run: an embedded Connection on a thread (``squall serve``)
  or the driver Lambda function (deployed API);
- :mod:`~squall.service.deployment` — the deployed driver function's Connections (from its environment);
- :mod:`~squall.service.service` — the operations behind the endpoints (submit, status, result, cancel, …);
- :mod:`~squall.service.api` — the Powertools ``APIGatewayRestResolver`` and pydantic models' routes;
- :mod:`~squall.service.server` — ``squall serve``: stdlib HTTP server that feeds API Gateway proxy events to
  the same resolver.

May import: the SDK (:mod:`squall.connection`, :mod:`squall.result`, …), :mod:`squall.formats` (result
encodings: Arrow IPC stream, Parquet, CSV, JSON), the driver and the layers below; never
:mod:`squall.functions` or the CLI. The SDK never imports this package (``make check-arch``).

Importing this package needs nothing beyond Squall's core dependencies; :mod:`~squall.service.api` and
:mod:`~squall.service.server` need the ``aws`` extra (``aws-lambda-powertools``, ``pydantic``).
"""
