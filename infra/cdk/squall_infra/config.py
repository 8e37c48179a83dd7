"""Deployment parameters of the Squall stack, read from CDK context.

Every parameter has a default, so ``cdk deploy`` with no context deploys a working stack. Override one
with ``-c name=value`` (``cdk``/``make synth CONTEXT=...``) or in ``cdk.json``. Values given on the
command line arrive as strings and are converted here. The same names (in snake_case) are the
Terraform module's variables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: Retention periods CloudWatch Logs accepts.
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
                      3288, 3653)  # fmt: skip
#: What the API Gateway REST API allows as integration timeout (the API function's timeout).
API_TIMEOUT_SECONDS = 29
#: Squall's own areas of its bucket (besides the data prefix): run state, results, query records.
EXCHANGE_PREFIX = "exchange/"
RESULTS_PREFIX = "results/"
QUERIES_PREFIX = "queries/"
#: Where a write stages its parts inside an output prefix (``squall.driver.write.locations.STAGING``).
STAGING_FOLDER = ".squall-staging/"
#: An output prefix: ``s3://bucket/`` or ``s3://bucket/a/b/``. Key folders may not start with ``.`` (no ``.``
#: or ``..``) and hold no IAM wildcard (``*``, ``?``) or policy variable (``$``). The same pattern is the
#: Terraform variable's validation.
OUTPUT_PREFIX = re.compile(
    r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/((?:[A-Za-z0-9!_'()=+-][A-Za-z0-9!_.'()=+-]*/)*)"
)


class ConfigError(ValueError):
    """A context value is missing, malformed or out of range."""


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"not a boolean: {value!r}")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"not an integer: {value!r}")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"not an integer: {value!r}") from None


def _to_optional_int(value: Any) -> int | None:
    return None if value in (None, "", "none", "None", "null") else _to_int(value)


def _to_optional_str(value: Any) -> str | None:
    return None if value in (None, "", "none", "None", "null") else str(value).strip()


def _to_list(value: Any) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        text = value.strip()
        items = json.loads(text) if text.startswith("[") else text.split(",")
    else:
        items = list(value)
    return [str(v).strip() for v in items if str(v).strip()]


def _to_json_object(value: Any) -> str:
    """A JSON object (a mapping, or its JSON text) as compact JSON text."""
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError as err:
        raise ConfigError(f"not JSON: {err}") from None
    if not isinstance(parsed, Mapping):
        raise ConfigError(f"not a JSON object: {value!r}")
    return json.dumps(parsed, separators=(",", ":"), sort_keys=True)


def _param(default: Any, doc: str, convert: Callable[[Any], Any]) -> Any:
    meta = {"doc": doc, "convert": convert, "default": default}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class SquallConfig:
    """All knobs of a Squall deployment. Context key = field name in camelCase (``workerMemoryMb``)."""

    stack_name: str = _param("Squall", "CloudFormation stack name; prefixes the function names", str)
    architecture: str = _param("arm64", "Lambda architecture, arm64 or x86_64 (the layer must match)", str)
    worker_memory_mb: int = _param(4096, "worker memory (MB); Lambda gives ~1 vCPU per 1,769 MB", _to_int)
    driver_memory_mb: int = _param(1024, "driver memory (MB)", _to_int)
    api_memory_mb: int = _param(512, "API function memory (MB)", _to_int)
    timeout_seconds: int = _param(300, "worker timeout (s), at most 900", _to_int)
    driver_timeout_seconds: int = _param(900, "driver timeout (s), at least the worker timeout", _to_int)
    worker_ephemeral_storage_mb: int = _param(2048, "worker /tmp size (MB) for spills", _to_int)
    max_workers: int = _param(64, "upper bound on workers per query (SQUALL_MAX_WORKERS)", _to_int)
    reserved_concurrency: int | None = _param(
        None, "reserved concurrency of the worker function; none = use the account pool", _to_optional_int
    )
    service_settings: str = _param(
        "{}",
        "the service's [service] settings as a JSON object (SQUALL_SERVICE): admission limits max_running, "
        "max_queued, user_running, user_queued (squall/service/README.md)",
        _to_json_object,
    )
    users: str = _param(
        "{}",
        "the deployed API's users as a JSON object (SQUALL_USERS, the API function only): {name: {iam_principal, "
        "role, max_running, max_queued, max_bytes_scanned, catalogs, …}} (squall/service/README.md); {} = every "
        "IAM principal the API lets in, with the [service] limits",
        _to_json_object,
    )
    lambda_concurrency: int = _param(
        1000,
        "concurrent executions the queries may use (SQUALL_CONCURRENCY): the account's limit, or the worker's "
        "reservedConcurrency; max_running defaults to it // (1 + maxWorkers)",
        _to_int,
    )
    bucket_name: str | None = _param(
        None,
        "existing bucket to use; none = create one (lifecycle rules only on a created bucket)",
        _to_optional_str,
    )
    data_prefix: str = _param("data/", "prefix of the Parquet data in the bucket (read-only for Squall)", str)
    data_buckets: list[str] = _param(  # noqa: RUF009 (_param returns dataclasses.field(default_factory=...))
        [], "more read-only data locations: bucket or bucket/prefix, comma-separated or a JSON list", _to_list
    )
    output_prefixes: list[str] = _param(  # noqa: RUF009 (_param returns dataclasses.field(default_factory=...))
        [],
        "where writes may go (COPY, CREATE TABLE AS, INSERT, UNLOAD): s3://bucket/prefix/ locations, "
        "comma-separated or a JSON list; none = every write refused, no write permission",
        _to_list,
    )
    exchange_ttl_days: int = _param(1, "days before exchange/ objects expire", _to_int)
    results_ttl_days: int = _param(7, "days before results/ and queries/ objects expire", _to_int)
    auth_mode: str = _param("IAM", "API authorization: IAM (SigV4) or API_KEY (x-api-key header)", str)
    log_retention_days: int = _param(
        30, "CloudWatch Logs retention of functions and API access logs", _to_int
    )
    tracing: bool = _param(False, "X-Ray tracing of functions and API stage", _to_bool)
    throttle_rate_limit: int = _param(20, "API steady-state requests per second", _to_int)
    throttle_burst_limit: int = _param(40, "API burst requests", _to_int)
    api_gateway_cloudwatch_role: bool = _param(
        True,
        "set the account's API Gateway CloudWatch role (needed once per region for access logs)",
        _to_bool,
    )
    layer_path: str | None = _param(
        None,
        "dependency layer zip or folder; none = build/layer-<architecture>.zip; 'placeholder' = empty (synth only)",
        _to_optional_str,
    )
    function_name_prefix: str | None = _param(
        None, "prefix of function names; none = the stack name", _to_optional_str
    )

    # ----------------------------------------------------------------------------------------------

    @classmethod
    def context_keys(cls) -> dict[str, str]:
        """CDK context key -> field name."""
        return {_camel(f.name): f.name for f in fields(cls)}

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> SquallConfig:
        """Build from a context lookup (``node.try_get_context``); missing keys take the defaults."""
        values: dict[str, Any] = {}
        for key, name in cls.context_keys().items():
            raw = get(key)
            if raw is None:
                continue
            convert = cls.__dataclass_fields__[name].metadata["convert"]
            try:
                values[name] = convert(raw)
            except ConfigError as exc:
                raise ConfigError(f"context {key}: {exc}") from None
        return cls(**values).validated()

    @classmethod
    def from_mapping(cls, context: Mapping[str, Any]) -> SquallConfig:
        """Build from a plain mapping of context keys."""
        return cls.from_context(context.get)

    def validated(self) -> SquallConfig:
        """Return ``self`` or raise :class:`ConfigError` naming the first bad value."""
        checks: list[tuple[bool, str]] = [
            (self.architecture in ("arm64", "x86_64"), "architecture must be arm64 or x86_64"),
            (self.auth_mode in ("IAM", "API_KEY"), "authMode must be IAM or API_KEY"),
            (128 <= self.worker_memory_mb <= 10240, "workerMemoryMb must be 128..10240"),
            (128 <= self.driver_memory_mb <= 10240, "driverMemoryMb must be 128..10240"),
            (128 <= self.api_memory_mb <= 10240, "apiMemoryMb must be 128..10240"),
            (1 <= self.timeout_seconds <= 900, "timeoutSeconds must be 1..900"),
            (
                self.timeout_seconds <= self.driver_timeout_seconds <= 900,
                "driverTimeoutSeconds must be timeoutSeconds..900",
            ),
            (512 <= self.worker_ephemeral_storage_mb <= 10240, "workerEphemeralStorageMb must be 512..10240"),
            (1 <= self.max_workers <= 10000, "maxWorkers must be 1..10000"),
            (
                self.reserved_concurrency is None or self.reserved_concurrency >= 1,
                "reservedConcurrency must be at least 1 (or none)",
            ),
            (self.lambda_concurrency >= 1, "lambdaConcurrency must be at least 1"),
            (self.exchange_ttl_days >= 1, "exchangeTtlDays must be at least 1"),
            (self.results_ttl_days >= 1, "resultsTtlDays must be at least 1"),
            (
                self.log_retention_days in LOG_RETENTION_DAYS,
                f"logRetentionDays must be one of {LOG_RETENTION_DAYS}",
            ),
            (
                self.throttle_rate_limit >= 1 and self.throttle_burst_limit >= 1,
                "throttle limits must be positive",
            ),
            (
                bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,100}", self.stack_name)),
                "stackName: letters, digits, -",
            ),
            (
                bool(re.fullmatch(r"(?:[a-z0-9][a-z0-9!_.*'()-]*/)+", self.data_prefix)),
                "dataPrefix must look like 'data/' (ends with /)",
            ),
            (
                self.bucket_name is None
                or bool(re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", self.bucket_name)),
                "bucketName is not a valid bucket name",
            ),
            (
                self.function_name_prefix is None or len(self.function_name_prefix) <= 50,
                "functionNamePrefix must be at most 50 characters",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self._check_output_prefixes()
        return self

    def _check_output_prefixes(self) -> None:
        own = (self.data_prefix, EXCHANGE_PREFIX, RESULTS_PREFIX, QUERIES_PREFIX)
        for item in self.output_prefixes:
            match = OUTPUT_PREFIX.fullmatch(item)
            if not match:
                raise ConfigError(
                    f"outputPrefixes: {item!r} must look like s3://bucket/prefix/ (ends with /; folders "
                    "of letters, digits and !_.'()=+-, none starting with '.')"
                )
            bucket, prefix = match.groups()
            clash = [a for a in own if a.startswith(prefix) or prefix.startswith(a)]
            if bucket == self.bucket_name and clash:
                raise ConfigError(
                    f"outputPrefixes: {item!r} overlaps Squall's own {clash[0]} in its bucket "
                    "(the data prefix is read-only, the other areas expire): pick another prefix"
                )
        if len(set(self.output_prefixes)) != len(self.output_prefixes):
            raise ConfigError("outputPrefixes: a location is listed twice")

    @property
    def name_prefix(self) -> str:
        """Prefix of the physical function names."""
        return self.function_name_prefix or self.stack_name

    @property
    def data_locations(self) -> list[tuple[str | None, str]]:
        """Extra read-only locations as (bucket, key prefix); ``None`` bucket = Squall's bucket."""
        out: list[tuple[str | None, str]] = [(None, self.data_prefix)]
        for item in self.data_buckets:
            bucket, _, prefix = item.removeprefix("s3://").partition("/")
            if prefix and not prefix.endswith("/"):
                prefix += "/"
            out.append((bucket, prefix))
        return out

    @property
    def output_locations(self) -> list[tuple[str, str]]:
        """The output prefixes as (bucket, key prefix); the key prefix ends with ``/`` or is empty."""
        out = []
        for item in self.output_prefixes:
            match = OUTPUT_PREFIX.fullmatch(item)
            assert match is not None  # validated
            out.append((match.group(1), match.group(2)))
        return out

    @property
    def writable(self) -> str:
        """``SQUALL_WRITABLE``: the output prefixes, comma-separated (empty: nothing writable)."""
        return ",".join(self.output_prefixes)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def describe() -> str:
    """A Markdown table of every parameter: context key, default, meaning."""
    rows = ["| context key | default | meaning |", "|---|---|---|"]
    for key, name in SquallConfig.context_keys().items():
        f = SquallConfig.__dataclass_fields__[name]
        default = f.metadata["default"]
        default = "none" if default is None else default
        rows.append(f"| `{key}` | `{json.dumps(default) if isinstance(default, list | bool) else default}` | "
                    f"{f.metadata['doc']} |")  # fmt: skip
    return "\n".join(rows)
