"""Worker Lambda handler: ``squall.functions.worker.handler``.

All the logic is in :func:`squall.driver.platforms.lambda_.worker.run_worker_event`: start the children of the
invocation tree, run one rank, write its status to S3. Powertools adds structured logs (with the
Lambda context), an EMF metric per invocation and, when enabled, an X-Ray segment.

If those imports fail (a missing dependency, a broken layer), this module still loads and ``handler``
writes the attempt's ``error`` key with the import error
(:func:`squall.driver.platforms.lambda_.startup.report_start_failure`): the driver fails the query at
once with the worker's own message instead of re-invoking a worker that can never start. When this
module itself cannot load, Lambda answers the driver's probe with its init error
(:mod:`squall.driver.platforms.lambda_.init_errors`).
"""

from __future__ import annotations

from typing import Any

try:
    from aws_lambda_powertools import Logger, Metrics, Tracer
    from aws_lambda_powertools.metrics import MetricUnit

    from squall.driver.platforms.lambda_.worker import run_worker_event
except Exception as exc:  # cannot start: report it from the handler (below), once
    _START_ERROR: BaseException | None = exc
else:
    _START_ERROR = None
    logger = Logger(service="squall")
    metrics = Metrics(namespace="Squall", service="squall")
    tracer = Tracer(service="squall")

    @logger.inject_lambda_context(log_event=False)
    @metrics.log_metrics
    @tracer.capture_lambda_handler(capture_response=False)
    def _handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        logger.append_keys(query_id=event.get("query_id"), ranks=event.get("ranks"),
                           attempt=event.get("attempt"))  # fmt: skip
        out = run_worker_event(event, context)
        metrics.add_metric(name="RankDone" if out["status"] == "done" else "RankFailed", unit=MetricUnit.Count,
                           value=1)  # fmt: skip
        logger.info("rank finished", extra=out)
        return out


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Lambda entry point (asynchronous invocations from the driver or a parent worker; the driver's
    synchronous ``{"probe": true}`` is answered at once: ``start_error`` is None or why workers cannot
    start, see :mod:`squall.driver.platforms.lambda_.init_errors`)."""
    if event.get("probe"):
        from squall.driver.platforms.lambda_.startup import start_message

        return {"status": "probe", "start_error": start_message(_START_ERROR) if _START_ERROR else None}
    if _START_ERROR is not None:
        from squall.driver.platforms.lambda_.startup import report_start_failure

        return report_start_failure(event, _START_ERROR)
    return _handler(event, context)
