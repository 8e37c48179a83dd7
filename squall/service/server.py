"""``squall serve``: the REST API on a local HTTP server, with the very same resolver as the Lambda function.

Each HTTP request becomes an API Gateway REST proxy event (``httpMethod``, ``path``, headers, query string,
body — base64 when it is not UTF-8), goes through :func:`squall.service.api.make_handler` (token check, then
the Powertools resolver) and the proxy response is written back. Stdlib only: ``ThreadingHTTPServer``, one
thread per connection and no lock around the resolver (:mod:`squall.service.resolver`), so ``/healthz``,
status polls and downloads are answered while another request plans a large query or converts a large
result. The listen backlog (:data:`LISTEN_BACKLOG`) absorbs bursts of connections.

Queries run on a :class:`~squall.service.backend.LocalBackend`: one background thread, one query at a time,
a FIFO queue of at most 32 waiting queries (then 429). State (status, results) goes to ``--state``: a folder
(default: a temporary folder removed on exit) or ``s3://bucket/prefix``. With a folder there are no
presigned URLs: results larger than the inline limit are streamed from their file by this server.

``/`` serves the web console (static files in ``squall/service/console``, through the same resolver).
Finished queries expire after ``--result-ttl`` (default 24 h): a sweeper thread deletes their state, and the
API answers 410 for them. Bound beyond loopback without a token, the server warns on stderr.

At start (:mod:`squall.service.recovery`) the server marks the queries a stopped server left queued or running in
``--state`` as failed (``ServerStopped``) and removes the worker folders, logs and exchange folders that stopped
servers left in ``/dev/shm`` and ``$TMPDIR``. Threads it starts get a large stack and the recursion limit is
raised (:data:`RECURSION_LIMIT`), so deeply nested SQL (hundreds of parentheses or nested subqueries) plans
instead of hitting the limit; past it a query is a one-line 400.
"""

from __future__ import annotations

import base64
import gc
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from squall.errors import OptionError
from squall.service.api import FILE_HEADER, USER_KEY, Handler, make_handler
from squall.service.audit import AuditLog, utc_now
from squall.service.backend import LocalBackend
from squall.service.recovery import owner_stamp, remove_orphans
from squall.service.service import DEFAULT_INLINE_LIMIT, DEFAULT_RESULT_TTL_S, Service
from squall.service.settings import ServiceSettings
from squall.service.state import state_store
from squall.service.users import User, Users

log = logging.getLogger("squall.service")

#: API Gateway's payload limit; larger request bodies get 413.
MAX_BODY = 10 * 1024 * 1024
#: connections the kernel queues before the server accepts them (the standard library's default is 5: a burst
#: of clients would get connection resets)
LISTEN_BACKLOG = 128
#: stack of every thread started after :func:`serve` begins (request threads, the runner): planning deeply nested
#: SQL recurses deeply, and a thread's default stack would bound it before the recursion limit does
THREAD_STACK = 64 * 1024 * 1024
#: the interpreter's recursion limit in ``squall serve`` (Python's default, 1000, stops the planner at about
#: 40 nested parentheses once a request thread's own frames are counted)
RECURSION_LIMIT = 10_000
#: garbage collection (see :func:`tune_gc`): young generations collected automatically with a larger first
#: threshold than Python's 700 (fewer, still short pauses), full collections only by :func:`_collect_loop`
GC_THRESHOLDS = (5000, 10, 1_000_000)
#: a full collection runs this often, when no request is planning (at the latest after FULL_GC_DEFER_MAX_S)
FULL_GC_EVERY_S = 10.0
FULL_GC_DEFER_MAX_S = 60.0
_COPY_CHUNK = 1024 * 1024


def to_event(
    method: str, target: str, headers: list[tuple[str, str]], body: bytes, client: str
) -> dict[str, Any]:
    """An API Gateway REST (v1) proxy event for one HTTP request."""
    parts = urlsplit(target)
    path = unquote(parts.path) or "/"
    query = parse_qsl(parts.query, keep_blank_values=True)
    multi_query: dict[str, list[str]] = {}
    for key, value in query:
        multi_query.setdefault(key, []).append(value)
    multi_headers: dict[str, list[str]] = {}
    for key, value in headers:
        multi_headers.setdefault(key, []).append(value)
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    request_id = uuid.uuid4().hex
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {k: v[-1] for k, v in multi_headers.items()},
        "multiValueHeaders": multi_headers,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": path,
            "stage": "$default",
            "requestId": request_id,
            "identity": {"sourceIp": client},
        },
        "body": text if body else None,
        "isBase64Encoded": encoded,
    }


def _response_headers(response: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, values in (response.get("multiValueHeaders") or {}).items():
        out.extend((key, str(v)) for v in values)
    seen = {k.lower() for k, _ in out}
    for key, value in (response.get("headers") or {}).items():
        if key.lower() not in seen:
            out.append((key, str(value)))
    return out


class _RequestHandler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"
    server_version = "squall"
    # headers and body leave in two writes: with Nagle's algorithm the second waits for the client's delayed
    # ACK of the first (40 ms per keep-alive request)
    disable_nagle_algorithm = True

    #: the user of the request being answered (for the access log; "-" before authentication)
    _user_name = "-"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.access_log:
            sys.stderr.write(f"{utc_now()} {self.address_string()} {self._user_name} - {format % args}\n")

    def _json(self, status: int, error: str, detail: str) -> None:
        body = json.dumps({"error": error, "detail": detail}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _dispatch(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            self._json(411, "LengthRequired", "send the body with a Content-Length")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            self._json(400, "BadRequest", "invalid Content-Length")
            return
        if length > MAX_BODY:
            self.close_connection = True
            self._json(413, "PayloadTooLarge", f"request bodies are limited to {MAX_BODY} bytes")
            return
        body = self.rfile.read(length) if length else b""
        event = to_event(self.command, self.path, list(self.headers.items()), body, self.client_address[0])
        self._user_name = "-"
        try:
            response = self.server.handler(event, None)
        except Exception:
            log.exception("unhandled error for %s %s", self.command, self.path)
            self._json(500, "InternalError", "internal error (see the server log)")
            return
        finally:
            if isinstance(event.get(USER_KEY), User):
                self._user_name = event[USER_KEY].name
        self._respond(response)

    def _respond(self, response: dict[str, Any]) -> None:
        headers = _response_headers(response)
        stream = next((v for k, v in headers if k.lower() == FILE_HEADER.lower()), None)
        headers = [(k, v) for k, v in headers if k.lower() not in (FILE_HEADER.lower(), "content-length")]
        if stream is not None:
            self._send_file(int(response["statusCode"]), headers, stream)
            return
        raw = response.get("body") or ""
        data = base64.b64decode(raw) if response.get("isBase64Encoded") else raw.encode()
        self.send_response(int(response["statusCode"]))
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_file(self, status: int, headers: list[tuple[str, str]], path: str) -> None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError:
            self._json(404, "NotFound", "the result file is gone")
            return
        with fh:
            size = os.fstat(fh.fileno()).st_size
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if self.command != "HEAD":
                shutil.copyfileobj(fh, self.wfile, _COPY_CHUNK)

    def __getattr__(self, name: str) -> Any:
        # every method (TRACE, PROPFIND, …) goes to the resolver, which answers 404 JSON for unknown routes
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)


class ApiServer(ThreadingHTTPServer):
    """A threading HTTP server that feeds every request to a Lambda-style ``handler(event, context)``."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], handler: Handler, *, access_log: bool = False) -> None:
        super().__init__(address, _RequestHandler)
        self.handler = handler
        self.access_log = access_log

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that went away mid-response (a browser tab closed, a poll aborted) is not an error
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"


def serialized(handler: Handler) -> Handler:
    """``handler`` itself: the resolver of :func:`~squall.service.api.make_handler` is safe for many threads
    (:class:`~squall.service.resolver.ConcurrentRestResolver`), so requests are no longer put in turn. Kept for
    callers that wrapped their handler with it."""
    return handler


def is_loopback(host: str) -> bool:
    """True when ``host`` (an address or a name) only reaches this machine."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def deep_threads() -> None:
    """Threads started from now on get :data:`THREAD_STACK` bytes of stack, and the recursion limit is at least
    :data:`RECURSION_LIMIT` (see the module doc)."""
    try:
        threading.stack_size(THREAD_STACK)
    except (ValueError, RuntimeError):  # a platform that cannot size thread stacks keeps Python's limit
        return
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))


def tune_gc() -> None:
    """Garbage collection for a server whose requests may build millions of objects: planning a
    100,000-element IN list makes ~1.6 M syntax-tree objects (cyclic: they hold their parents), and each of
    Python's automatic full collections during it held the interpreter 200-500 ms (5.5 s of a 15 s plan),
    stalling every other request. What is alive now (modules, the catalog) is frozen out of collections;
    young generations are collected as objects come (:data:`GC_THRESHOLDS`); full collections run from
    :func:`_collect_loop` between plans."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _collect_loop(service: Service, stop: threading.Event) -> None:
    """A full garbage collection every :data:`FULL_GC_EVERY_S` while no request plans (else it waits, at most
    :data:`FULL_GC_DEFER_MAX_S`), until ``stop``."""
    last = time.monotonic()
    while not stop.wait(1.0):
        since = time.monotonic() - last
        if since >= FULL_GC_EVERY_S and (service.planning == 0 or since >= FULL_GC_DEFER_MAX_S):
            gc.collect()
            last = time.monotonic()


def _recover(service: Service) -> None:
    """Before the first request: deep threads, this process as the owner of the queries, and what stopped
    servers left behind cleared (their queries failed, their folders removed)."""
    deep_threads()  # before the first request (and query) thread starts
    service.owner = owner_stamp()
    _clean_up_stopped_servers()
    stale = service.recover()
    if stale:
        print(f"marked {len(stale)} queries of a stopped server as failed", file=sys.stderr, flush=True)


def _clean_up_stopped_servers() -> None:
    """Remove what servers (and other Squall processes) that stopped left in /dev/shm and $TMPDIR."""
    try:
        removed = remove_orphans()
    except OSError:
        log.warning("cannot remove what stopped servers left", exc_info=True)
        return
    if removed:
        print(
            f"removed {len(removed)} folders and files left by stopped servers", file=sys.stderr, flush=True
        )


def _sweep_loop(service: Service, stop: threading.Event, interval_s: float) -> None:
    """Delete expired queries now and then every ``interval_s`` until ``stop``."""
    while True:
        try:
            removed = service.sweep()
            if removed:
                log.info("expired %d queries", removed)
        except Exception:
            log.warning("cannot sweep expired queries", exc_info=True)
        if stop.wait(interval_s):
            return


def _announce(server: ApiServer, service: Service, host: str, where: str, writable: list[str]) -> None:
    """``serving on URL (…)`` on stderr (what tests and scripts wait for), after a warning when the server
    is reachable beyond this machine with no token."""
    count = len(service.users.users)
    auth = (
        f"{count} user{'s' if count != 1 else ''}, bearer token required"
        if service.users.need_token
        else "no token"
    )
    if not service.users.need_token and not is_loopback(host):
        print(
            f"warning: listening on {host} without --token: anyone who can reach port "
            f"{server.server_address[1]} can run queries (set --token, $SQUALL_TOKEN or --users)",
            file=sys.stderr,
            flush=True,
        )
    print(
        f"serving on {server.url} (web console: {server.url}/; {where}, {auth}"
        f"{', writable ' + ', '.join(writable) if writable else ''})",
        file=sys.stderr,
        flush=True,
    )


def serve(
    *,
    data: str | None,
    catalogs: dict[str, dict[str, str]] | None = None,
    writable: list[str] | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None = None,
    platform: str = "local",
    workers: int | None = None,
    state: str | None = None,
    inline_limit: int = DEFAULT_INLINE_LIMIT,
    access_log: bool = False,
    ready: threading.Event | None = None,
    result_ttl_s: float | None = DEFAULT_RESULT_TTL_S,
    settings: ServiceSettings | None = None,
    users: Users | None = None,
    audit_log: str | None = None,
) -> None:
    """Run the API until SIGINT/SIGTERM. Prints ``serving on http://HOST:PORT`` on stderr when ready.
    ``result_ttl_s``: finished queries are deleted this long after they end (None: kept). ``catalogs``: named
    Iceberg catalogs (see :func:`squall.connect`); ``writable``: where write statements (COPY, CREATE TABLE AS, …)
    may write (none: every write is refused); ``settings``: the scheduler, worker pool and per-query limits (see
    :mod:`squall.service.settings`); ``users``: who may call it (:mod:`squall.service.users`; ``token`` adds
    one admin); ``audit_log``: a file (or ``-``, stdout) for the audit lines (:mod:`squall.service.audit`)."""
    temp_state = None
    if state is None:
        temp_state = tempfile.mkdtemp(prefix="squall-state-")
        state = temp_state
    audit = AuditLog(audit_log) if audit_log else None
    store = state_store(state)
    backend = LocalBackend(data, workers=workers, platform=platform, catalogs=catalogs, writable=writable,
                           settings=settings)  # fmt: skip
    service = Service(store, backend, inline_limit=inline_limit, token=token, result_ttl_s=result_ttl_s,
                      users=users, audit=audit)  # fmt: skip
    try:
        _recover(service)
        try:
            server = ApiServer((host, port), make_handler(service), access_log=access_log)
        except OSError as err:
            raise OptionError(f"cannot listen on {host}:{port}: {err.strerror}") from None
        stop = threading.Event()
        tune_gc()
        threading.Thread(target=_collect_loop, args=(service, stop), name="squall-gc", daemon=True).start()
        if result_ttl_s:
            interval = min(60.0, max(0.5, result_ttl_s / 10))
            threading.Thread(
                target=_sweep_loop, args=(service, stop, interval), name="squall-sweeper", daemon=True
            ).start()

        def _terminate(signum: int, frame: Any) -> None:
            if not stop.is_set():
                stop.set()
                threading.Thread(target=server.shutdown, daemon=True).start()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _terminate)
            signal.signal(signal.SIGINT, _terminate)
        _announce(server, service, host, f"data {data}, state {store.url}", backend.writable)
        if ready is not None:
            ready.set()
        with server:
            server.serve_forever(poll_interval=0.2)
        stop.set()
    finally:
        service.close()
        if temp_state is not None:
            shutil.rmtree(temp_state, ignore_errors=True)
