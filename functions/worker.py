"""Worker Lambda handler: ``squall.functions.worker.handler``.

All the logic is in :func:`squall.driver.platforms.lambda_.worker.run_worker_event`: start the children of the
invocation tree, run one rank, write its status to S3. Powertools adds structured logs (with the
Lambda context), an EMF metric per invocation and, when enabled, an X-Ray segment.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

from squall.driver.platforms.lambda_.worker import run_worker_event

logger = Logger(service="squall")
metrics = Metrics(namespace="Squall", service="squall")
tracer = Tracer(service="squall")


@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Lambda entry point (asynchronous invocations from the driver or a parent worker)."""
    logger.append_keys(query_id=event.get("query_id"), ranks=event.get("ranks"), attempt=event.get("attempt"))
    out = run_worker_event(event, context)
    metrics.add_metric(name="RankDone" if out["status"] == "done" else "RankFailed", unit=MetricUnit.Count,
                       value=1)  # fmt: skip
    logger.info("rank finished", extra=out)
    return out
