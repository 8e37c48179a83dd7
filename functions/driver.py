"""Driver Lambda handler: ``squall.functions.driver.handler``.

Runs the API's ``run``/``tables``/``explain`` events with
:func:`squall.service.runner.handle_driver_event` on Connections over the deployment's data
(``SQUALL_DATA``, default ``s3://$SQUALL_BUCKET/$SQUALL_DATA_PREFIX``) whose platform is
``SQUALL_PLATFORM`` (``lambda``: the worker function ``SQUALL_WORKER_FUNCTION``, exchange and run state
under ``s3://$SQUALL_BUCKET/$SQUALL_EXCHANGE_PREFIX``). Connections are kept per worker count while
the execution environment is warm (:mod:`squall.service.deployment`). When a ``run`` event's query has ended
(succeeded, failed or cancelled), :func:`squall.service.deployment.query_ended` gives back its admission slots
and starts the next queued queries (:mod:`squall.service.lambda_admission`).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from squall.service.deployment import connection_for, query_ended
from squall.service.runner import handle_driver_event

logger = Logger(service="squall")


@logger.inject_lambda_context(log_event=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Lambda entry point."""
    try:
        return handle_driver_event(event, connection_for)
    finally:
        if event.get("op", "run") == "run" and event.get("query_id") and event.get("state"):
            query_ended(str(event["query_id"]), str(event["state"]))
