"""The Python SDK for a Squall service: the embedded Connection's API over the REST API.

>>> con = squall.connect("http://127.0.0.1:8080", token="…")     # squall serve
>>> con = squall.connect("https://abc.execute-api.eu-west-1.amazonaws.com/v1", auth="iam")  # deployed
>>> result = con.sql("SELECT count(*) FROM lineitem", progress=True)
>>> result.to_arrow(), result.stats["elapsed_s"]

:meth:`RemoteConnection.sql` submits (with a fresh Idempotency-Key, so a retried POST never runs the query
twice), polls the status with backoff (20 ms growing to 1 s), shows progress when asked (``progress=True``
draws a bar on stderr, a callable gets :class:`squall.driver.platforms.base.Progress` updates), then downloads the
result as an Arrow IPC stream — following the presigned URL of a large result. Errors are the
``squall.errors`` classes with the server's message (``BindError``, ``SqlSyntaxError``, …); HTTP-level
failures are :class:`RemoteError`, unknown ids and rejected requests :class:`RemoteUserError`, a wrong token
:class:`AuthenticationError`. Ctrl-C while waiting cancels the query on the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from squall import aws
from squall.driver.platforms.base import Progress
from squall.errors import NotSupportedError, OptionError, QueryCancelled, SquallError, UserError, squall_error
from squall.plan import Plan
from squall.result import Result
from squall.version import __version__

ProgressArg = bool | Callable[[Progress], None] | None
_RETRY_STATUS = frozenset({429, 502, 503, 504})
#: how long one status request of :meth:`RemoteConnection.wait` may wait for the query to end (a long poll)
LONG_POLL_S = 5.0
_REGION = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com", re.IGNORECASE)


class RemoteError(SquallError):
    """The service could not be reached or failed (network error, 5xx). ``status`` is the HTTP status or 0."""

    def __init__(self, message: str, status: int = 0, error: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error


class RemoteUserError(RemoteError, UserError):
    """The service rejected the request (4xx): unknown query id, malformed request, conflict."""


class AuthenticationError(RemoteUserError, OptionError):
    """Missing or wrong credentials (401/403)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _error_for(status: int, data: bytes) -> SquallError:
    try:
        body = json.loads(data)
        name, detail = str(body["error"]), str(body["detail"])
    except (ValueError, KeyError, TypeError):
        name, detail = "", data.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    known = squall_error(name, detail) if name else None
    if known is not None:
        return known  # type: ignore[return-value]
    if status in (401, 403):
        return AuthenticationError(detail, status, name or None)
    if 400 <= status < 500 and status != 429:
        return RemoteUserError(detail, status, name or None)
    return RemoteError(f"HTTP {status}: {detail}", status, name or None)


def _query_error(doc: dict[str, Any]) -> SquallError:
    error = doc.get("error") or {}

    name, detail = str(error.get("error", "")), str(error.get("detail", f"query {doc.get('status')}"))
    known = squall_error(name, detail) if name else None
    if known is not None:
        return known  # type: ignore[return-value]
    if doc.get("status") == "cancelled":
        return QueryCancelled(detail)
    return RemoteError(f"{name}: {detail}" if name else detail, 0, name or None)


@contextlib.contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Callable[[Progress], None] | None]:
    """A rich progress bar on stderr while the block runs; yields the callback (None when disabled)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    columns = (TextColumn("[bold]query"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Bar(*columns, transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("queued", total=1.0)

        def update(state: Progress) -> None:
            done = sum(1 for n in state.done.values() if n >= state.world_size)
            bar.update(task, completed=state.fraction, description=f"stage {done}/{state.stages}")

        yield update


class RemoteConnection:
    """A Squall service at ``endpoint``, with the embedded :class:`squall.Connection`'s API.

    ``token``: bearer token (``squall serve --token``; default ``$SQUALL_TOKEN``). ``auth="iam"``: sign every
    request with SigV4 (service ``execute-api``) using boto3's default credentials — for an API Gateway
    deployed with IAM authorization; ``region`` defaults to the one in the endpoint's host name.
    ``workers``: default worker count for queries. ``timeout_s``: per HTTP request.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        token: str | None = None,
        auth: str | None = None,
        workers: int | None = None,
        region: str | None = None,
        timeout_s: float = 60.0,
        poll_max_s: float = 1.0,
        retries: int = 3,
    ) -> None:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise OptionError(f"endpoint must be an http(s) URL, got {endpoint!r}")
        if auth not in (None, "token", "iam"):
            raise OptionError(f"auth must be 'token' or 'iam', got {auth!r}")
        self.endpoint = endpoint.rstrip("/")
        self.auth = auth or "token"
        self.token = token if token is not None else os.environ.get("SQUALL_TOKEN") or None
        self.default_workers = workers
        self.timeout_s = timeout_s
        self.poll_max_s = poll_max_s
        self.retries = retries
        self._region = region
        self._credentials: Any = None
        self._opener = urllib.request.build_opener(_NoRedirect())
        self._closed = False

    @property
    def workers(self) -> int | None:
        """The default worker count of this connection's queries (None: the server's default)."""
        return self.default_workers

    # --- HTTP -----------------------------------------------------------------------------------

    def _sign(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        if self._credentials is None:
            credentials, default_region = aws.default_credentials()
            if credentials is None:
                raise AuthenticationError("auth='iam' needs AWS credentials (none found)", 0)
            self._credentials = credentials
            if self._region is None:
                match = _REGION.search(urllib.parse.urlsplit(self.endpoint).netloc)
                self._region = match.group(1) if match else default_region
            if not self._region:
                raise OptionError("auth='iam' needs a region: pass region=… or set AWS_DEFAULT_REGION")
        return aws.sigv4_headers(
            self._credentials, "execute-api", str(self._region), method, url, body, headers
        )

    def _headers(
        self, method: str, url: str, body: bytes | None, extra: dict[str, str] | None
    ) -> dict[str, str]:
        headers = {
            "Accept": "application/json",
            "User-Agent": f"squall/{__version__}",
            **(extra or {}),
        }
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.auth == "iam":
            return self._sign(method, url, body, headers)
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request (retried on connection errors, 429 and 502-504); returns status, headers, body
        for 2xx and 303, raises the mapped error otherwise."""
        if self._closed:
            raise OptionError("connection is closed")
        url = self.endpoint + path
        data = json.dumps(body).encode() if body is not None else None
        delay = 0.2
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(
                url, data=data, method=method, headers=self._headers(method, url, data, headers)
            )
            try:
                with self._opener.open(request, timeout=self.timeout_s) as response:
                    return response.status, dict(response.headers.items()), response.read()
            except urllib.error.HTTPError as err:
                payload = err.read()
                if err.code == 303:
                    return 303, dict(err.headers.items()), payload
                if err.code in _RETRY_STATUS and attempt < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise _error_for(err.code, payload) from None
            except (urllib.error.URLError, OSError) as err:
                if attempt < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                reason = getattr(err, "reason", err)
                raise RemoteError(f"cannot reach {self.endpoint}: {reason}") from None
        raise AssertionError("unreachable")

    def _json(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        _status, _headers, data = self._request(method, path, body, headers)
        return json.loads(data)

    # --- queries --------------------------------------------------------------------------------

    def submit(
        self,
        sql: str,
        *,
        workers: int | None = None,
        format: str = "arrow",
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Submit ``sql`` and return its query id at once (see :meth:`wait`, :meth:`result`)."""
        body: dict[str, Any] = {"sql": sql, "format": format}
        if workers or self.default_workers:
            body["workers"] = workers or self.default_workers
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        key = idempotency_key or uuid.uuid4().hex
        doc = self._json("POST", "/v1/queries", body, {"Idempotency-Key": key})
        return str(doc["query_id"])

    def status(self, query_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        """The query's status document: status, progress, error, stats. ``wait_s``: a query not ended yet is
        answered when it ends or after that many seconds (a long poll)."""
        query = f"?wait_s={wait_s:g}" if wait_s > 0 else ""
        return dict(self._json("GET", f"/v1/queries/{urllib.parse.quote(query_id)}{query}"))

    def cancel(self, query_id: str) -> dict[str, Any]:
        """Ask the server to cancel the query; returns its status."""
        return dict(self._json("DELETE", f"/v1/queries/{urllib.parse.quote(query_id)}"))

    def wait(self, query_id: str, *, progress: ProgressArg = None) -> dict[str, Any]:
        """Poll until the query finishes; returns its status, raises its error if it failed or was cancelled.
        Ctrl-C cancels the query on the server."""
        with progress_bar(progress is True) as bar:
            callback = bar if progress is True else (progress or None)
            delay, last = 0.02, None
            # a long poll: one request per query when nothing is shown (squall serve answers when the query
            # ends; the deployed API at once, so the pause below still applies there); with progress shown, the
            # server's progress updates (every 0.5 s) are worth a request each
            wait_s = 0.5 if callback is not None else min(LONG_POLL_S, self.timeout_s / 2)
            try:
                while True:
                    started = time.monotonic()
                    doc = self.status(query_id, wait_s)
                    info = doc.get("progress")
                    if callback is not None and info and info != last:
                        last = info
                        done = {int(k): int(v) for k, v in info["ranks_done"].items()}
                        callback(Progress(int(info["stages"]), int(info["world_size"]), done))
                    if doc["status"] == "succeeded":
                        return doc
                    if doc["status"] in ("failed", "cancelled"):
                        raise _query_error(doc)
                    if time.monotonic() - started < wait_s / 2:  # the server did not wait: poll with backoff
                        time.sleep(delay)
                        delay = min(delay * 1.5, self.poll_max_s)
            except KeyboardInterrupt:
                with contextlib.suppress(SquallError):
                    self.cancel(query_id)
                raise

    def fetch(self, query_id: str, format: str = "arrow") -> bytes:
        """The result bytes of a finished query in ``format`` (follows the link of a large result)."""
        path = f"/v1/queries/{urllib.parse.quote(query_id)}/result?format={urllib.parse.quote(format)}"
        status, headers, data = self._request("GET", path, headers={"Accept": "*/*"})
        if status == 303:
            url = headers.get("Location") or json.loads(data)["url"]
            try:
                with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                    return response.read()
            except (urllib.error.URLError, OSError) as err:
                raise RemoteError(f"cannot download the result of {query_id}: {err}") from None
        return data

    def result(self, query_id: str, status: dict[str, Any] | None = None) -> Result:
        """The :class:`squall.Result` of a finished query (rows as Arrow, and its stats)."""
        doc = status or self.status(query_id)
        if doc["status"] != "succeeded":
            raise (
                _query_error(doc)
                if doc["status"] in ("failed", "cancelled")
                else RemoteUserError(f"query {query_id} is {doc['status']}", 409, "NotReady")
            )
        table = pa.ipc.open_stream(pa.py_buffer(self.fetch(query_id, "arrow"))).read_all()
        return Result(table, dict(doc.get("stats") or {}))

    def sql(
        self,
        sql: str,
        *,
        progress: ProgressArg = None,
        workers: int | None = None,
        timeout_s: float | None = None,
    ) -> Result:
        """Run one read-only query on the service and return its result."""
        query_id = self.submit(sql, workers=workers, timeout_s=timeout_s)
        return self.result(query_id, self.wait(query_id, progress=progress))

    def explain(self, sql: str, *, workers: int | None = None, estimate: bool = False) -> str:
        """The distributed plan as text (``estimate=True``: with the scale model's predicted time and cost)."""
        return str(self._explain(sql, workers, estimate)["text"])

    def plan(self, sql: str, *, workers: int | None = None) -> Plan:
        """The distributed plan of ``sql`` (nothing runs)."""
        return Plan.from_dict(self._explain(sql, workers)["plan"])

    def _explain(self, sql: str, workers: int | None, estimate: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"sql": sql}
        if estimate:
            body["estimate"] = True
        if workers or self.default_workers:
            body["workers"] = workers or self.default_workers
        return dict(self._json("POST", "/v1/explain", body))

    # --- catalog --------------------------------------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        """Every table with its columns (name, Arrow type, nullable) and row count."""
        return list(self._json("GET", "/v1/tables")["tables"])

    def tables(self) -> list[str]:
        """The table names, sorted."""
        return sorted(t["name"] for t in self.describe())

    def register(self, name: str, location: str) -> None:
        """Not available remotely: the server's catalog is fixed by its ``--data``."""
        raise NotSupportedError("register() on a remote connection (the server's --data defines the tables)")

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> RemoteConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<squall.RemoteConnection {self.endpoint}>"
