"""The Squall stack: bucket, dependency layer, worker/driver/API functions, REST API.

Resources (``cdk synth`` shows all of them):

- **Bucket** (new, or an existing one by name): public access blocked, TLS-only policy, SSE-S3,
  lifecycle rules expiring ``exchange/`` (``exchangeTtlDays``) and ``results/`` + ``queries/``
  (``resultsTtlDays``), aborting incomplete multipart uploads after a day.
- **Layer**: third-party dependencies (``make layer``), one architecture.
- **Functions** (python3.12): ``worker`` (``squall.functions.worker.handler``), ``driver``
  (``squall.functions.driver.handler``), ``api`` (``squall.functions.api.handler``), each with its own
  role and log group. Physical names are ``<stack>-worker`` etc., so the environment and IAM policies
  can name them without circular references.
- **REST API** (regional, proxy to ``api``): IAM (SigV4) or API-key authorization, stage throttling,
  JSON access logs.

IAM is least privilege, per function (:data:`GRANTS`): S3 actions on the bucket's ``data/`` (read),
``exchange/`` and ``queries/`` prefixes only, ``lambda:InvokeFunction`` on the worker
(driver, worker: invocation tree) or driver (api; the driver too: it starts the next queued query) only, logs on
the function's own log group. Writes
(:data:`WRITES`) go only under the ``outputPrefixes``, and with none there is no write grant at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from squall_infra.config import (
    API_TIMEOUT_SECONDS,
    EXCHANGE_PREFIX,
    LOG_RETENTION_DAYS,
    QUERIES_PREFIX,
    RESULTS_PREFIX,
    STAGING_FOLDER,
    SquallConfig,
)

#: API Gateway stage; routes carry their own version (``/v1/queries``), so the URL reads ``…/squall/v1/…``
STAGE_NAME = "squall"
BINARY_MEDIA_TYPES = (
    "application/vnd.apache.arrow.stream",
    "application/vnd.apache.parquet",
    "application/octet-stream",
)
HANDLERS = {
    "worker": "squall.functions.worker.handler",
    "driver": "squall.functions.driver.handler",
    "api": "squall.functions.api.handler",
}
RUNTIME = lambda_.Runtime.PYTHON_3_12
#: Days -> RetentionDays member (the enum lists them in ascending order, INFINITE last).
RETENTION = dict(zip(LOG_RETENTION_DAYS, list(logs.RetentionDays)[: len(LOG_RETENTION_DAYS)], strict=True))


@dataclass(frozen=True)
class Grant:
    """S3 actions on one area of the bucket, for one function. ``area`` is data/exchange/results/queries."""

    area: str
    actions: tuple[str, ...]


#: What each function may do, by bucket area. ``data`` covers the data prefix and ``dataBuckets``.
#: Proven by tests/infra/test_iam_enforced.py (the serverless path under IAM enforcement with exactly these
#: grants; it also reports any grant no request used). Query records, results and result pages live under
#: ``queries/<id>/`` (the driver writes them, the API reads and presigns them); no role touches ``results/``.
GRANTS: dict[str, tuple[Grant, ...]] = {
    "worker": (
        Grant("data", ("s3:GetObject",)),
        Grant("exchange", ("s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload")),
    ),
    "driver": (
        Grant("data", ("s3:GetObject",)),
        # the driver writes the run's plan reference and ABORT marker there, and deletes the run's objects
        Grant("exchange", ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")),
        # the query's request, cancel marker and status; its result (and pages) after the run;
        # DeleteObject: admission slots and queue entries (_admission/ under queries/) are given back
        Grant("queries", ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")),
    ),
    "api": (
        # records, idempotency keys, cancel markers; results read (inline) or presigned (large); admission
        Grant("queries", ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")),
    ),
}
#: Prefixes each function may list (``s3:ListBucket`` with an ``s3:prefix`` condition).
#: (``queries/`` is listable so a missing query's status is a 404, not a 403 the API would report as 500)
LISTS: dict[str, tuple[str, ...]] = {
    "worker": ("data", "exchange"),
    "driver": ("data", "exchange", "queries"),
    "api": ("queries",),
}


@dataclass(frozen=True)
class WriteGrant:
    """S3 actions under every output prefix (``outputPrefixes``), for one function.

    ``under`` is a folder inside each prefix ("" = the whole prefix); ``lists`` adds ``s3:ListBucket`` on
    each output bucket for the prefix only.
    """

    under: str
    actions: tuple[str, ...]
    lists: bool = False


#: Who writes where (the api function never touches outputs: it only relays to the driver).
#: - worker: uploads its part files (multipart when large) into ``<prefix>.squall-staging/<query>/…``.
#: - driver: commits — a server-side copy staged → final (GetObject on the source, PutObject on the
#:   target, multipart copies for large parts), then ``_squall_commit_<query>`` and table markers;
#:   deletes the staging folder, the files OVERWRITE replaces and the folders DROP TABLE drops; checks what
#:   exists before writing (HEAD = GetObject, ListBucket).
WRITES: dict[str, WriteGrant] = {
    "worker": WriteGrant(STAGING_FOLDER, ("s3:PutObject", "s3:AbortMultipartUpload")),
    "driver": WriteGrant(
        "", ("s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"), lists=True
    ),
}
#: Which functions each function may invoke.
#: (the driver invokes the driver too: when its query ends it starts the next queued ones)
INVOKES: dict[str, tuple[str, ...]] = {
    "worker": ("worker",),
    "driver": ("worker", "driver"),
    "api": ("driver",),
}


class SquallStack(cdk.Stack):
    """Everything one Squall deployment needs in an AWS account and region."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: SquallConfig,
        code_dir: Path,
        layer_path: Path,
        **kwargs: object,
    ) -> None:
        """Define the stack.

        ``code_dir`` is the staged ``squall`` package (:func:`squall_infra.staging.stage_function_code`),
        ``layer_path`` the layer zip or folder (holding ``python/``).
        """
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = cfg = config
        self.function_names = {role: f"{cfg.name_prefix}-{role}" for role in HANDLERS}

        self.bucket = self._bucket()
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=lambda_.Code.from_asset(str(layer_path)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[self.architecture],
            description=f"Squall runtime dependencies (duckdb, pyarrow, sqlglot, ...) for {cfg.architecture}",
        )
        code = lambda_.Code.from_asset(str(code_dir))
        self.functions = {role: self._function(role, code) for role in HANDLERS}
        self.api = self._api()

        cdk.CfnOutput(self, "ApiUrl", value=self.api.url, description="squall.connect(<this>, auth=...)")
        cdk.CfnOutput(self, "BucketName", value=self.bucket.bucket_name)
        cdk.CfnOutput(self, "DataPrefix", value=f"s3://{self.bucket.bucket_name}/{cfg.data_prefix}")
        cdk.CfnOutput(self, "AuthMode", value=cfg.auth_mode)
        for role, fn in self.functions.items():
            cdk.CfnOutput(self, f"{role.capitalize()}FunctionName", value=fn.function_name)
        cdk.CfnOutput(self, "LayerVersionArn", value=self.layer.layer_version_arn)

    # ------------------------------------------------------------------------------------------ parts

    @property
    def architecture(self) -> lambda_.Architecture:
        """The configured Lambda architecture."""
        return (
            lambda_.Architecture.ARM_64
            if self.config.architecture == "arm64"
            else lambda_.Architecture.X86_64
        )

    def _bucket(self) -> s3.IBucket:
        cfg = self.config
        if cfg.bucket_name:
            return s3.Bucket.from_bucket_name(self, "Bucket", cfg.bucket_name)
        return s3.Bucket(
            self,
            "Bucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            encryption=s3.BucketEncryption.S3_MANAGED,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-exchange",
                    prefix=EXCHANGE_PREFIX,
                    expiration=cdk.Duration.days(cfg.exchange_ttl_days),
                ),
                s3.LifecycleRule(
                    id="expire-results",
                    prefix=RESULTS_PREFIX,
                    expiration=cdk.Duration.days(cfg.results_ttl_days),
                ),
                s3.LifecycleRule(
                    id="expire-queries",
                    prefix=QUERIES_PREFIX,
                    expiration=cdk.Duration.days(cfg.results_ttl_days),
                ),
                s3.LifecycleRule(
                    id="abort-incomplete-multipart-uploads",
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(1),
                ),
            ],
        )

    def function_arn(self, role: str) -> str:
        """ARN of one of the stack's functions, built from its name (no reference, so no cycles)."""
        return self.format_arn(
            service="lambda",
            resource="function",
            resource_name=self.function_names[role],
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )

    def environment(self, role: str) -> dict[str, str]:
        """Environment variables of a function."""
        cfg = self.config
        return {
            "SQUALL_PLATFORM": "lambda",
            "SQUALL_ROLE": role,
            "SQUALL_BUCKET": self.bucket.bucket_name,
            "SQUALL_DATA_PREFIX": cfg.data_prefix,
            "SQUALL_EXCHANGE_PREFIX": EXCHANGE_PREFIX,
            "SQUALL_RESULTS_PREFIX": RESULTS_PREFIX,
            "SQUALL_QUERIES_PREFIX": QUERIES_PREFIX,
            "SQUALL_WORKER_FUNCTION": self.function_names["worker"],
            "SQUALL_DRIVER_FUNCTION": self.function_names["driver"],
            "SQUALL_MAX_WORKERS": str(cfg.max_workers),
            "SQUALL_WORKER_MEMORY_MB": str(cfg.worker_memory_mb),
            "SQUALL_WORKER_TIMEOUT_SECONDS": str(cfg.timeout_seconds),
            "SQUALL_RESULTS_TTL_DAYS": str(cfg.results_ttl_days),
            # admission (squall/service/lambda_admission.py): the [service] limits and the concurrency they share
            "SQUALL_SERVICE": cfg.service_settings,
            "SQUALL_CONCURRENCY": str(cfg.lambda_concurrency),
            "POWERTOOLS_SERVICE_NAME": "squall",
            "POWERTOOLS_METRICS_NAMESPACE": "Squall",
            "POWERTOOLS_LOG_LEVEL": "INFO",
            "POWERTOOLS_TRACE_DISABLED": "false" if cfg.tracing else "true",
            # the driver's connections take writable=[...] from it; absent = every write refused
            **({"SQUALL_WRITABLE": cfg.writable} if cfg.output_prefixes else {}),
            # who may use the API and their own limits (squall/service/users.py): the API function only
            **({"SQUALL_USERS": cfg.users} if role == "api" and cfg.users != "{}" else {}),
        }

    def _policy_statements(self, role: str) -> list[iam.PolicyStatement]:
        cfg = self.config
        bucket_arn = self.bucket.bucket_arn
        partition = cdk.Aws.PARTITION
        prefixes = {"exchange": EXCHANGE_PREFIX, "results": RESULTS_PREFIX, "queries": QUERIES_PREFIX}
        statements = []
        for grant in GRANTS[role]:
            if grant.area == "data":
                resources = [
                    self.bucket.arn_for_objects(f"{prefix}*")
                    if bucket is None
                    else f"arn:{partition}:s3:::{bucket}/{prefix}*"
                    for bucket, prefix in cfg.data_locations
                ]
            else:
                resources = [self.bucket.arn_for_objects(f"{prefixes[grant.area]}*")]
            statements.append(
                iam.PolicyStatement(
                    sid=f"S3{grant.area.capitalize()}", actions=list(grant.actions), resources=resources
                )
            )
        listed = LISTS[role]
        if listed:
            own = [cfg.data_prefix if a == "data" else prefixes[a] for a in listed]
            statements.append(
                iam.PolicyStatement(
                    sid="S3ListPrefixes",
                    actions=["s3:ListBucket"],
                    resources=[bucket_arn],
                    conditions={"StringLike": {"s3:prefix": sorted({p for o in own for p in (o, f"{o}*")})}},
                )
            )
            for i, (bucket, prefix) in enumerate(cfg.data_locations[1:] if "data" in listed else []):
                conditions = {"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}} if prefix else None
                statements.append(
                    iam.PolicyStatement(
                        sid=f"S3ListDataBucket{i}",
                        actions=["s3:ListBucket"],
                        resources=[f"arn:{partition}:s3:::{bucket}"],
                        conditions=conditions,
                    )
                )
        statements += self._write_statements(role)
        targets = INVOKES[role]
        if targets:
            statements.append(
                iam.PolicyStatement(
                    sid="InvokeSquallFunctions",
                    actions=["lambda:InvokeFunction"],
                    resources=[
                        arn for t in targets for arn in (self.function_arn(t), f"{self.function_arn(t)}:*")
                    ],
                )
            )
        return statements

    def _write_statements(self, role: str) -> list[iam.PolicyStatement]:
        """The role's writes under the output prefixes (:data:`WRITES`); none without output prefixes."""
        grant = WRITES.get(role)
        locations = self.config.output_locations
        if grant is None or not locations:
            return []
        partition = cdk.Aws.PARTITION
        statements = [
            iam.PolicyStatement(
                sid="S3WriteStaging" if grant.under else "S3WriteOutputs",
                actions=list(grant.actions),
                resources=[f"arn:{partition}:s3:::{b}/{p}{grant.under}*" for b, p in locations],
            )
        ]
        if (
            grant.lists
        ):  # one statement per location: a shared one would let each prefix be listed in every bucket
            for i, (bucket, prefix) in enumerate(locations):
                conditions = {"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}} if prefix else None
                statements.append(
                    iam.PolicyStatement(
                        sid=f"S3ListOutput{i}",
                        actions=["s3:ListBucket"],
                        resources=[f"arn:{partition}:s3:::{bucket}"],
                        conditions=conditions,
                    )
                )
        return statements

    def _function(self, role: str, code: lambda_.Code) -> lambda_.Function:
        cfg = self.config
        name = self.function_names[role]
        log_group = logs.LogGroup(
            self,
            f"{role.capitalize()}Logs",
            log_group_name=f"/aws/lambda/{name}",
            retention=RETENTION[cfg.log_retention_days],
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        exec_role = iam.Role(
            self,
            f"{role.capitalize()}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Squall {role} function",
        )
        exec_role.add_to_policy(
            iam.PolicyStatement(
                sid="OwnLogGroup",
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            )
        )
        for statement in self._policy_statements(role):
            exec_role.add_to_policy(statement)

        sizes = {
            "worker": (cfg.worker_memory_mb, cfg.timeout_seconds),
            "driver": (cfg.driver_memory_mb, cfg.driver_timeout_seconds),
            "api": (cfg.api_memory_mb, API_TIMEOUT_SECONDS),
        }
        memory, timeout = sizes[role]
        fn = lambda_.Function(
            self,
            f"{role.capitalize()}Function",
            function_name=name,
            description=f"Squall {role}",
            runtime=RUNTIME,
            architecture=self.architecture,
            handler=HANDLERS[role],
            code=code,
            layers=[self.layer],
            memory_size=memory,
            timeout=cdk.Duration.seconds(timeout),
            ephemeral_storage_size=cdk.Size.mebibytes(
                cfg.worker_ephemeral_storage_mb if role == "worker" else 512
            ),
            environment=self.environment(role),
            role=exec_role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE if cfg.tracing else lambda_.Tracing.DISABLED,
            reserved_concurrent_executions=cfg.reserved_concurrency if role == "worker" else None,
            # the driver retries failed workers itself (exchange writes are idempotent); Lambda's own
            # asynchronous retries would come minutes later and only duplicate work.
            retry_attempts=0,
        )
        return fn

    def _api(self) -> apigw.LambdaRestApi:
        cfg = self.config
        access_logs = logs.LogGroup(
            self,
            "ApiAccessLogs",
            retention=RETENTION[cfg.log_retention_days],
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        if cfg.auth_mode == "IAM":
            method_options = apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM)
        else:
            method_options = apigw.MethodOptions(api_key_required=True)
        api = apigw.LambdaRestApi(
            self,
            "Api",
            handler=self.functions["api"],
            proxy=True,
            rest_api_name=f"{cfg.name_prefix}-api",
            description="Squall SQL query API",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=cfg.api_gateway_cloudwatch_role,
            cloud_watch_role_removal_policy=cdk.RemovalPolicy.RETAIN,
            default_method_options=method_options,
            api_key_source_type=apigw.ApiKeySourceType.HEADER if cfg.auth_mode == "API_KEY" else None,
            # results come back as Arrow IPC or Parquet bytes
            binary_media_types=list(BINARY_MEDIA_TYPES),
            deploy_options=apigw.StageOptions(
                stage_name=STAGE_NAME,
                throttling_rate_limit=cfg.throttle_rate_limit,
                throttling_burst_limit=cfg.throttle_burst_limit,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                metrics_enabled=True,
                logging_level=apigw.MethodLoggingLevel.ERROR,  # INFO would log request bodies (SQL text)
                data_trace_enabled=False,
                tracing_enabled=cfg.tracing,
            ),
        )
        if cfg.auth_mode == "API_KEY":
            plan = api.add_usage_plan(
                "UsagePlan",
                name=f"{cfg.name_prefix}-usage",
                throttle=apigw.ThrottleSettings(
                    rate_limit=cfg.throttle_rate_limit, burst_limit=cfg.throttle_burst_limit
                ),
                api_stages=[apigw.UsagePlanPerApiStage(api=api, stage=api.deployment_stage)],
            )
            key = api.add_api_key("ApiKey", api_key_name=f"{cfg.name_prefix}-key")
            plan.add_api_key(key)
            cdk.CfnOutput(
                self,
                "ApiKeyId",
                value=key.key_id,
                description="aws apigateway get-api-key --include-value --api-key <this>",
            )
        return api
