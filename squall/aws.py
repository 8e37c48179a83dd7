"""The one place Squall talks to AWS SDKs: client construction, ``s3://`` URLs, error messages.

Every boto3 client Squall builds (S3 for storage, exchange and service state,
Lambda for invocations) comes from :func:`client`, with one retry policy:
botocore's ``standard`` mode (exponential backoff with jitter on throttling,
5xx and connection errors), ``max_retries`` retries after the first try.
Endpoint, region and credentials come from the standard AWS settings
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, profiles, …) unless given.

boto3/botocore are imported lazily: importing this module costs nothing.

May import: the standard library and :mod:`squall.errors` only.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from squall.errors import AccessDenied, DataError, UserError

#: the retry policy of every client (botocore counts retries, not tries)
RETRY_MODE = "standard"
MAX_RETRIES = 8
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60

_S3_URL = re.compile(r"s3://([^/]+)/?(.*)")

#: called with (service, client) for every client made from now on (fault injection, tests)
_client_hooks: list[Callable[[str, Any], None]] = []


#: the settings a boto3 Session reads from the environment when it resolves endpoints, region and credentials
_SESSION_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_LAMBDA",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)
_sessions: dict[tuple[str | None, ...], Any] = {}
_session_lock = threading.Lock()


def _session() -> Any:
    """One boto3 Session per process and environment (call with ``_session_lock`` held). A new Session
    loads botocore's service models again: ~75 ms of CPU per client, where a client from a kept Session
    takes ~7 ms — paid by every Lambda worker invocation for each client it makes. Clients stay
    per caller (their event hooks are theirs); an environment that changes (another endpoint, rotated
    credentials in the variables) gets a Session of its own."""
    import boto3

    key = tuple(os.environ.get(name) for name in _SESSION_ENV)
    made = _sessions.get(key)
    if made is None:
        if len(_sessions) >= 16:
            _sessions.clear()
        made = _sessions[key] = boto3.session.Session()
    return made


def add_client_hook(hook: Callable[[str, Any], None]) -> None:
    """Call ``hook(service, client)`` on every client :func:`client` makes from now on in this process."""
    _client_hooks.append(hook)


def client(
    service: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    max_pool_connections: int = 32,
    max_retries: int = MAX_RETRIES,
    read_timeout_s: float = READ_TIMEOUT_S,
    retry_mode: str = RETRY_MODE,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> Any:
    """A thread-safe boto3 client for ``service`` ("s3", "lambda", …) with Squall's retry policy.

    ``retry_mode`` "adaptive" adds botocore's client-side rate limiting to the standard policy.
    """
    from botocore.config import Config

    cfg = Config(
        max_pool_connections=max_pool_connections,
        retries={"mode": retry_mode, "max_attempts": int(max_retries)},
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        tcp_keepalive=True,
    )
    with _session_lock:  # a boto3 Session may not make clients from two threads at once
        made = _session().client(
            service, endpoint_url=endpoint_url or None, region_name=region or None, config=cfg
        )
    for hook in _client_hooks:
        hook(service, made)
    return made


def s3_client(options: Mapping[str, Any]) -> Any:
    """An S3 client from storage options (``endpoint_url``, ``region``, ``max_pool_connections``,
    ``max_retries``, ``retry_mode``): what table scans and writes of one connection share."""
    return client(
        "s3",
        endpoint_url=options.get("endpoint_url"),
        region=options.get("region"),
        max_pool_connections=int(options.get("max_pool_connections", 32)),
        max_retries=int(options.get("max_retries", MAX_RETRIES)),
        retry_mode=str(options.get("retry_mode", RETRY_MODE)),
    )


def is_s3_url(url: str) -> bool:
    return url.lower().startswith("s3://")


def parse_s3_url(url: str, error: type[UserError] = DataError, what: str = "S3 location") -> tuple[str, str]:
    """``s3://bucket/some/key`` → ``("bucket", "some/key")``; ``error`` (one line) when it is not one."""
    m = _S3_URL.fullmatch(url)
    if not m:
        raise error(f"{what} must look like s3://bucket/prefix, not {url!r}")
    return m.group(1), m.group(2)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError ("NoSuchKey", "412", …), "" for other errors."""
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def retries_of(response: Any) -> int:
    """How many times botocore retried the call that returned ``response``."""
    return int(((response or {}).get("ResponseMetadata") or {}).get("RetryAttempts", 0))


#: error codes of a request the caller's IAM permissions (or a bucket policy) refuse
DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "403"})
#: the IAM action an SDK operation needs (for the messages of refused requests)
OPERATION_ACTIONS = {
    "GetObject": "s3:GetObject", "HeadObject": "s3:GetObject", "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket", "HeadBucket": "s3:ListBucket", "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject", "UploadPart": "s3:PutObject", "CompleteMultipartUpload": "s3:PutObject",
    "CopyObject": "s3:PutObject", "UploadPartCopy": "s3:PutObject", "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "DeleteObject": "s3:DeleteObject", "DeleteObjects": "s3:DeleteObject", "Invoke": "lambda:InvokeFunction",
}  # fmt: skip


def denied_message(exc: BaseException, resource: str) -> str | None:
    """``access denied: RESOURCE (ACTION) for the ROLE's role`` when ``exc`` is an AWS access denial, else None.

    The action comes from the failed SDK operation; the role is ``SQUALL_ROLE`` (the deployed function:
    worker, driver or api), left out elsewhere."""
    if error_code(exc) not in DENIED_CODES:
        return None
    operation = str(getattr(exc, "operation_name", "") or "")
    action = OPERATION_ACTIONS.get(operation, operation)
    role = os.environ.get("SQUALL_ROLE")
    return (
        f"access denied: {resource}"
        + (f" ({action})" if action else "")
        + (f" for the {role}'s role" if role else "")
    )


def denied_error(exc: BaseException, bucket: str, key: str = "") -> AccessDenied | None:
    """An :class:`~squall.errors.AccessDenied` naming ``s3://bucket/key`` when ``exc`` is an access denial."""
    message = denied_message(exc, f"s3://{bucket}/{key}" if key else f"s3://{bucket}")
    return AccessDenied(message) if message else None


def describe_error(exc: BaseException, bucket: str, key: str = "") -> str:
    """One line saying what went wrong with an S3 call (no traceback)."""
    code = error_code(exc)
    where = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
    if code == "NoSuchBucket":
        return f"S3 bucket {bucket!r} does not exist"
    if code in ("NoSuchKey", "404"):
        return f"S3 object not found: {where}"
    denied = denied_message(exc, where)
    if denied:
        return denied
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return f"access denied to {where} ({code})"
    if code:
        msg = str((getattr(exc, "response", None) or {}).get("Error", {}).get("Message", "")).strip()
        return f"S3 error {code} on {where}: {msg}".rstrip(": ")
    return f"S3 request to {where} failed: {type(exc).__name__}: {exc}".splitlines()[0]


#: error codes that are the user's to fix (a missing bucket/key, no access), not a transient failure
USER_CODES = frozenset(
    {"NoSuchBucket", "NoSuchKey", "404", "AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"}
)


def is_user_error(exc: BaseException) -> bool:
    """True when an AWS error is a configuration mistake (missing bucket, no access), not a failure."""
    return error_code(exc) in USER_CODES


def default_credentials() -> tuple[Any, str | None]:
    """This environment's AWS credentials (None when there are none) and region (None when unset)."""
    import boto3

    session = boto3.session.Session()
    return session.get_credentials(), session.region_name


def sigv4_headers(
    credentials: Any, service: str, region: str, method: str, url: str, body: bytes | None,
    headers: dict[str, str],
) -> dict[str, str]:  # fmt: skip
    """``headers`` plus the SigV4 signature of a request to ``service`` (e.g. "execute-api") in ``region``."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
    SigV4Auth(credentials.get_frozen_credentials(), service, region).add_auth(request)
    return dict(request.headers.items())
