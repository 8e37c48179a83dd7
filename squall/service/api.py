"""The REST API: a Powertools ``APIGatewayRestResolver`` (validation on, pydantic models) over a Service.

Endpoints (all JSON unless noted; errors are ``{"error", "detail"}``):

=======  ===============================  ===================================================================
POST     ``/v1/queries``                  ``{sql, workers?, format?, timeout_s?}`` → 202 ``{query_id, status}``
                                          with ``Location``; ``Idempotency-Key`` header: same key, same query
GET      ``/v1/queries``                  history, newest first: ``?limit=`` (20), ``?page_token=``,
                                          ``?status=running,queued`` (only those) → ``{queries,
                                          next_page_token, next}``
GET      ``/v1/queries/{id}``             status, progress, error, stats; ``?wait_s=S`` (≤ 20): answered when the
                                          query ends or after S seconds (a long poll)
GET      ``/v1/queries/{id}/result``      ``?format=arrow|parquet|csv|json`` (else by ``Accept``), ``?offset=``,
                                          ``?limit=`` (CSV/JSON: 1000 rows a page by default); headers
                                          ``X-Total-Rows``, ``X-Offset``, ``X-Rows``, ``Link: <…>; rel="next"``.
                                          The bytes when small; when large 303 to a presigned URL (S3
                                          state), or streamed by ``squall serve``
DELETE   ``/v1/queries/{id}``             cancel → 202 with the status
GET      ``/v1/tables``                   the catalog with schemas (the tables the user may read)
GET      ``/v1/whoami``                   the signed-in user: name, role, own limits, catalogs
POST     ``/v1/explain``                  ``{sql, workers?, estimate?}`` → the distributed plan (+ cost)
GET      ``/v1/openapi.json``             this API's OpenAPI 3.1 document (no token needed)
GET      ``/healthz``                     liveness and version (no token needed)
GET      ``/``, ``/console/<file>``       the web console (static files; no token needed to load it)
=======  ===============================  ===================================================================

Status codes: squall.errors.UserError subclasses → 400 (``error`` is the class name), bad token → 401,
a table the user may not read (``PermissionDenied``) or an IAM principal that is no user → 403, unknown id
(or another user's) or route → 404, known route with another method → 405, no format for ``Accept`` → 406, result
not ready / query failed / reused Idempotency-Key → 409, query expired (older than the result TTL) → 410,
malformed body or parameter (also a body nested too deeply to parse) → 422, full queue → 429, shutting down
→ 503 (429 and 503 with ``Retry-After``). No message names the server's folders (see
:func:`squall.service.errors.public_detail`). :func:`make_handler` authenticates in front of the resolver
(:mod:`squall.service.users`: a bearer token, or on the deployed API the IAM principal of the request context),
so an unauthenticated request gets 401 before any validation; the routes act for that user (their own
queries only, unless an admin). The resolver holds no lock: planning a
submitted query, converting a result and streaming a file run in the request's own thread, in parallel with
every other request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.exceptions import ServiceError as PowertoolsServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

import squall
from squall.errors import InternalError, PermissionDenied, SquallError, UserError
from squall.formats import TEXT_FORMATS
from squall.service.errors import InvalidRequest, ServiceError, Unauthorized, public_detail
from squall.service.models import (
    ErrorBody,
    ExplainRequest,
    ExplainResponse,
    Health,
    QueryAccepted,
    QueryList,
    QueryRequest,
    QueryStatus,
    ResultFormat,
    ResultLink,
    TablesResponse,
    WhoAmI,
)
from squall.service.records import QUERY_ID
from squall.service.resolver import ConcurrentRestResolver
from squall.service.service import MAX_PAGE_ROWS, ResultBody, Service
from squall.service.users import ADMIN_ANONYMOUS, User, Users

log = logging.getLogger("squall.service")

#: Response header by which the resolver asks ``squall serve`` to stream a local file (never sent out).
FILE_HEADER = "X-Squall-Internal-File"
OPENAPI_PATH = "/v1/openapi.json"
HEALTH_PATH = "/healthz"
#: The web console's static files (``/`` is its index.html, ``/console/<file>`` the rest).
CONSOLE_DIR = Path(__file__).parent / "console"
CONSOLE_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
CONSOLE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
}
_PUBLIC_PATHS = frozenset({OPENAPI_PATH, HEALTH_PATH, "/"})
#: the key of the event under which :func:`make_handler` leaves the authenticated :class:`User` (set by the
#: handler on every request: a client cannot send it)
USER_KEY = "squall.user"

#: (method, path pattern) of every route, to answer 405 with ``Allow`` for a known path.
ROUTES = [
    (method, re.compile("^" + re.sub(r"<\w+>", "[^/]+", path) + "$"))
    for method, path in (
        ("POST", "/v1/queries"),
        ("GET", "/v1/queries"),
        ("GET", "/v1/queries/<query_id>"),
        ("DELETE", "/v1/queries/<query_id>"),
        ("GET", "/v1/queries/<query_id>/result"),
        ("GET", "/v1/tables"),
        ("GET", "/v1/whoami"),
        ("POST", "/v1/explain"),
        ("GET", OPENAPI_PATH),
        ("GET", HEALTH_PATH),
        ("GET", "/"),
        ("GET", "/console/<name>"),
    )
]

_STATUS = "(queued|running|succeeded|failed|cancelled)"
_STATUS_LIST = f"^{_STATUS}(,{_STATUS})*$"

Event = dict[str, Any]
Handler = Callable[[Event, Any], dict[str, Any]]


def _error(status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> Response:
    body = {"error": error, "detail": public_detail(detail)}
    return Response(status, content_types.APPLICATION_JSON, body, headers=headers)


def _errors(*codes: int) -> dict[int, Any]:
    text = {400: "bad SQL or option, or a limit of the server or the user", 401: "missing or wrong token",
            403: "a table the user may not read", 404: "unknown query (or another user's)",
            406: "no result format matches Accept",
            409: "conflict: not ready, failed, or Idempotency-Key reuse",
            410: "the query expired (older than the server's result TTL)", 422: "malformed request",
            429: "too many queries: retry after Retry-After seconds",
            503: "the server cannot take queries now (shutting down): retry after Retry-After seconds"}  # fmt: skip
    return {c: {"description": text[c], "content": {"application/json": {"model": ErrorBody}}} for c in codes}


def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e.get("loc", ()))
        why = (e.get("ctx") or {}).get("error") if e.get("type") == "json_invalid" else None
        parts.append(f"{where}: {e.get('msg', e.get('type', 'invalid'))}{f' ({why})' if why else ''}")
    return "; ".join(parts)[:1000] or "invalid request"


#: the longest long poll of ``GET /v1/queries/{id}?wait_s=`` (well inside every client's request timeout)
MAX_WAIT_S = 20.0


def _only_params(app: APIGatewayRestResolver, *allowed: str) -> None:
    """422 for a query parameter the route does not know (a typo such as ``?limt=`` is not ignored)."""
    given = app.current_event.get("multiValueQueryStringParameters") or {}
    given = given or app.current_event.get("queryStringParameters") or {}
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise InvalidRequest(
            f"query: unknown parameter {unknown[0]!r} (this route takes: {', '.join(allowed) or 'none'})"
        )


def request_user(event: Event) -> User:
    """The user :func:`make_handler` authenticated for ``event`` (none: the anonymous admin)."""
    user = event.get(USER_KEY)
    return user if isinstance(user, User) else ADMIN_ANONYMOUS


def _user(app: APIGatewayRestResolver) -> User:
    return request_user(app.current_event.raw_event)


def client_address(event: Event) -> str | None:
    """The caller's address from the request context (REST v1 ``identity.sourceIp``, HTTP v2 ``http.sourceIp``)."""
    context = event.get("requestContext") or {}
    address = (context.get("identity") or {}).get("sourceIp") or (context.get("http") or {}).get("sourceIp")
    return str(address) if address else None


def _location(app: APIGatewayRestResolver, path: str) -> str:
    stage = (app.current_event.get("requestContext") or {}).get("stage")
    return f"/{stage}{path}" if stage and stage != "$default" else path


def create_app(service: Service) -> APIGatewayRestResolver:
    """The resolver with every route of the API bound to ``service``. It holds no lock: requests are resolved
    in parallel, each in its own thread's request state (see :mod:`squall.service.resolver`)."""
    app = ConcurrentRestResolver(enable_validation=True)
    _query_routes(app, service)
    _query_id_routes(app, service)
    _result_route(app, service)
    _catalog_routes(app, service)
    _public_routes(app, service)
    _error_handlers(app)
    return app


def _query_routes(app: APIGatewayRestResolver, service: Service) -> None:
    """Submit and list: ``/v1/queries``."""

    @app.post(
        "/v1/queries",
        status_code=202,
        summary="Submit a query",
        responses={
            202: {"description": "accepted", "content": {"application/json": {"model": QueryAccepted}}},
            **_errors(400, 401, 403, 409, 422, 429, 503),
        },
    )
    def submit_query(
        body: QueryRequest,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
    ) -> Response[QueryAccepted]:
        status, replayed = service.submit(
            body.sql, workers=body.workers, fmt=body.format, timeout_s=body.timeout_s,
            idempotency_key=idempotency_key, user=_user(app), client=client_address(app.current_event.raw_event),
        )  # fmt: skip
        headers = {"Location": _location(app, f"/v1/queries/{status['query_id']}")}
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        accepted = QueryAccepted(query_id=status["query_id"], status=status["status"])
        return Response(202, content_types.APPLICATION_JSON, accepted, headers=headers)

    @app.get(
        "/v1/queries",
        summary="Query history, newest first",
        responses={
            200: {"description": "a page of queries", "content": {"application/json": {"model": QueryList}}},
            **_errors(401, 422),
        },
    )
    def list_queries(
        limit: Annotated[int, Query(ge=1, le=100, description="queries per page")] = 20,
        page_token: Annotated[
            str | None, Query(pattern=QUERY_ID.pattern, description="next_page_token of the previous page")
        ] = None,
        status: Annotated[
            str | None,
            Query(
                pattern=_STATUS_LIST,
                description="only queries in these statuses, comma-separated (the operator's view: "
                "running,queued); a page may then hold fewer than limit, follow next",
            ),
        ] = None,
    ) -> Response[QueryList]:
        _only_params(app, "limit", "page_token", "status")
        statuses = frozenset(status.split(",")) if status else None
        doc = service.history(limit, page_token, statuses, _user(app))
        token = doc["next_page_token"]
        params = {"limit": limit, "page_token": token, **({"status": status} if status else {})}
        query = urlencode(params) if token else None
        doc["next"] = _location(app, f"/v1/queries?{query}") if query else None
        return Response(200, content_types.APPLICATION_JSON, QueryList.model_validate(doc))


def _query_id_routes(app: APIGatewayRestResolver, service: Service) -> None:
    """Status (a long poll with ``?wait_s=``) and cancel: ``/v1/queries/{id}``."""

    @app.get(
        "/v1/queries/<query_id>",
        summary="Status, progress, error and statistics of a query",
        responses={
            200: {"description": "the status", "content": {"application/json": {"model": QueryStatus}}},
            **_errors(401, 404, 410, 422),
        },
    )
    def get_query(
        query_id: str,
        wait_s: Annotated[
            float,
            Query(
                ge=0,
                le=MAX_WAIT_S,
                description="a query not ended yet: answer when it ends or after this "
                "many seconds (a long poll; squall serve only, the deployed API answers at once)",
            ),
        ] = 0.0,
    ) -> Response[QueryStatus]:
        _only_params(app, "wait_s")
        doc = QueryStatus.model_validate(service.status(query_id, _user(app), wait_s))
        return Response(200, content_types.APPLICATION_JSON, doc)

    @app.delete(
        "/v1/queries/<query_id>",
        summary="Cancel a query",
        responses={
            202: {"description": "cancelling", "content": {"application/json": {"model": QueryStatus}}},
            **_errors(401, 404, 409, 410),
        },
    )
    def cancel_query(query_id: str) -> Response[QueryStatus]:
        doc = QueryStatus.model_validate(service.cancel(query_id, _user(app)))
        return Response(202, content_types.APPLICATION_JSON, doc)


def _result_route(app: APIGatewayRestResolver, service: Service) -> None:
    """``/v1/queries/{id}/result``: the bytes, a page of them, a 303 to a presigned URL or a local file."""

    @app.get(
        "/v1/queries/<query_id>/result",
        summary="The result of a finished query, or a page of it",
        description="Without ?format= the format follows Accept (a wildcard or none: the submitted format, "
        "else JSON). CSV and JSON come in pages (?offset=, ?limit=; 1000 rows by default), Arrow and Parquet "
        "whole unless ?limit= is given. Headers: X-Total-Rows, X-Offset, X-Rows, and Link: <…>; "
        'rel="next" while more rows follow.',
        responses={
            200: {
                "description": "the result (Arrow IPC stream, Parquet, CSV or JSON rows)",
                "content": {
                    "application/vnd.apache.arrow.stream": {"schema": {"type": "string", "format": "binary"}},
                    "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
                    "text/csv": {"schema": {"type": "string"}},
                    "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
                },
            },
            303: {
                "description": "large result: presigned URL",
                "content": {"application/json": {"model": ResultLink}},
            },
            **_errors(401, 404, 406, 409, 410, 422),
        },
    )
    # no return annotation: Powertools would serialize (and UTF-8 decode) the bytes through pydantic
    def get_result(
        query_id: str,
        format: Annotated[ResultFormat | None, Query()] = None,
        offset: Annotated[int, Query(ge=0, le=2**53, description="first row")] = 0,
        limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE_ROWS, description="rows in the page")] = None,
    ):
        _only_params(app, "format", "offset", "limit")
        accept = _header(app.current_event.raw_event, "accept")
        body = service.result(query_id, format, accept=accept, offset=offset, limit=limit, user=_user(app))
        headers = {"Content-Disposition": f'attachment; filename="{body.filename}"', "Vary": "Accept",
                   **_page_headers(app, query_id, body)}  # fmt: skip
        if body.data is not None:
            data: bytes | str = body.data.decode() if body.format in TEXT_FORMATS else body.data
            return Response(200, body.content_type, data, headers=headers)
        assert body.link is not None
        if body.link.url is not None:
            link = ResultLink.model_validate(
                {"url": body.link.url, "expires_in": service.link_expires_s, "format": body.format,
                 "bytes": body.size, "total_rows": body.total_rows, "offset": body.offset, "rows": body.rows,
                 "next": _next_page(app, query_id, body)}
            )  # fmt: skip
            headers = {k: v for k, v in headers.items() if k != "Content-Disposition"}
            headers["Location"] = body.link.url
            return Response(303, content_types.APPLICATION_JSON, link, headers=headers)
        headers[FILE_HEADER] = str(body.link.path)
        return Response(200, body.content_type, b"", headers=headers)


def _catalog_routes(app: APIGatewayRestResolver, service: Service) -> None:
    """``/v1/tables`` and ``/v1/explain``."""

    @app.get(
        "/v1/tables",
        summary="The catalog: tables and their schemas",
        responses={
            200: {"description": "the tables", "content": {"application/json": {"model": TablesResponse}}},
            **_errors(401),
        },
    )
    def list_tables() -> Response[TablesResponse]:
        doc = TablesResponse.model_validate({"tables": service.tables(_user(app))})
        return Response(200, content_types.APPLICATION_JSON, doc)

    @app.get(
        "/v1/whoami",
        summary="The signed-in user: name, role, own limits and catalogs",
        responses={
            200: {"description": "the user", "content": {"application/json": {"model": WhoAmI}}},
            **_errors(401),
        },
    )
    def whoami() -> Response[WhoAmI]:
        return Response(200, content_types.APPLICATION_JSON, WhoAmI.model_validate(_user(app).public()))

    @app.post(
        "/v1/explain",
        summary="The distributed plan of a query (nothing runs)",
        responses={
            200: {"description": "the plan", "content": {"application/json": {"model": ExplainResponse}}},
            **_errors(400, 401, 403, 422),
        },
    )
    def explain(body: ExplainRequest) -> Response[ExplainResponse]:
        explained = service.explain(body.sql, body.workers, estimate=body.estimate, user=_user(app))
        doc = ExplainResponse.model_validate(explained)
        return Response(200, content_types.APPLICATION_JSON, doc)


def _public_routes(app: APIGatewayRestResolver, service: Service) -> None:
    """The routes that need no token: ``/healthz``, the web console and the OpenAPI document."""
    openapi: dict[str, str] = {}

    @app.get(
        HEALTH_PATH,
        summary="Liveness and version (no token needed)",
        responses={200: {"description": "alive", "content": {"application/json": {"model": Health}}}},
    )
    def health() -> Response[Health]:
        return Response(200, content_types.APPLICATION_JSON, Health(status="ok", version=squall.__version__))

    @app.get("/", include_in_schema=False)
    def console_index():
        return _console_file("index.html")

    @app.get("/console/<name>", include_in_schema=False)
    def console_asset(name: str):
        return _console_file(name)

    @app.get(OPENAPI_PATH, include_in_schema=False)
    def openapi_document():  # returns Response; unannotated like get_result
        if "doc" not in openapi:
            openapi["doc"] = openapi_json(app, secured=service.users.need_token)
        return Response(200, content_types.APPLICATION_JSON, openapi["doc"])


def _error_handlers(app: APIGatewayRestResolver) -> None:
    """Every error as ``{"error", "detail"}`` with its status (see the module docstring)."""

    @app.exception_handler(ServiceError)
    def service_error(exc: ServiceError) -> Response:
        return _error(exc.status, exc.error, exc.detail, exc.headers or None)

    @app.exception_handler(UserError)
    def user_error(exc: UserError) -> Response:
        status = 403 if isinstance(exc, PermissionDenied) else 400
        return _error(
            status, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        )

    @app.exception_handler(SquallError)
    def engine_error(exc: SquallError) -> Response:
        log.warning("engine error: %s", exc)
        return _error(500 if isinstance(exc, InternalError) else 502, type(exc).__name__, str(exc))

    @app.exception_handler(RequestValidationError)
    def validation_error(exc: RequestValidationError) -> Response:
        return _error(422, "ValidationError", _validation_detail(exc))

    @app.exception_handler(RequestUnsupportedContentType)
    def unsupported_content_type(exc: RequestUnsupportedContentType) -> Response:
        return _error(415, "UnsupportedMediaType", "send the body as application/json")

    @app.exception_handler(PowertoolsServiceError)
    def powertools_error(exc: PowertoolsServiceError) -> Response:
        return _error(
            exc.status_code, "BadRequest" if exc.status_code < 500 else "InternalError", str(exc.msg)
        )

    @app.exception_handler(UnicodeDecodeError)
    def not_utf8(exc: UnicodeDecodeError) -> Response:
        return _error(422, "ValidationError", "body: not UTF-8 text")

    @app.exception_handler(NotFoundError)
    def not_found(exc: NotFoundError) -> Response:
        event = app.current_event
        allowed = sorted({method for method, rule in ROUTES if rule.match(event.path)})
        if allowed and event.http_method not in allowed:
            detail = f"{event.http_method} is not allowed on {event.path} (allowed: {', '.join(allowed)})"
            return _error(405, "MethodNotAllowed", detail, {"Allow": ", ".join(allowed)})
        return _error(404, "NotFound", f"no route {event.http_method} {event.path}")

    @app.exception_handler(Exception)
    def internal_error(exc: Exception) -> Response:
        log.exception("internal error")
        return _error(500, "InternalError", "internal error (see the server log)")


def _next_page(app: APIGatewayRestResolver, query_id: str, body: ResultBody) -> str | None:
    if body.next_offset is None:
        return None
    query = {"format": body.format, "offset": body.next_offset}
    if body.limit is not None:
        query["limit"] = body.limit
    return _location(app, f"/v1/queries/{query_id}/result?{urlencode(query)}")


def _page_headers(app: APIGatewayRestResolver, query_id: str, body: ResultBody) -> dict[str, str]:
    """X-Total-Rows, X-Offset, X-Rows and (while more rows follow) ``Link: <next>; rel="next"``."""
    headers = {}
    if body.total_rows is not None:
        headers["X-Total-Rows"] = str(body.total_rows)
        headers["X-Offset"] = str(body.offset)
        headers["X-Rows"] = str(body.rows)
    following = _next_page(app, query_id, body)
    if following is not None:
        headers["Link"] = f'<{following}>; rel="next"'
    return headers


_console_cache: dict[str, bytes] = {}


def _console_file(name: str) -> Response:
    """A static file of the web console, with its content type (404 JSON for anything else)."""
    path = CONSOLE_DIR / name
    content_type = CONSOLE_TYPES.get(path.suffix)
    if content_type is None or "/" in name or name.startswith(".") or not path.is_file():
        return _error(404, "NotFound", f"no console file {name!r}")
    if name not in _console_cache:
        _console_cache[name] = path.read_bytes()
    return Response(200, content_type, _console_cache[name].decode(), headers=CONSOLE_HEADERS)


def openapi_json(app: APIGatewayRestResolver, *, secured: bool) -> str:
    """The OpenAPI 3.1 document of ``app`` (bearer auth declared when ``secured``; ``/healthz`` is public)."""
    text = app.get_openapi_json_schema(
        title="Squall",
        version=squall.__version__,
        description="Serverless SQL over Parquet: submit a query, poll its status, fetch its result.",
        security_schemes={"bearer": HTTPBearer()} if secured else None,
        security=[{"bearer": []}] if secured else None,
    )
    if not secured:
        return text
    doc = json.loads(text)
    doc["paths"][HEALTH_PATH]["get"]["security"] = []
    return json.dumps(doc, indent=2)


def _header(event: Event, name: str) -> str | None:
    for key, value in (event.get("headers") or {}).items():
        if key.lower() == name:
            return value
    for key, values in (event.get("multiValueHeaders") or {}).items():
        if key.lower() == name and values:
            return values[-1]
    return None


def _proxy_error(
    status: int, error: str, detail: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    extra = {k: [v] for k, v in (headers or {}).items()}
    return {
        "statusCode": status,
        "multiValueHeaders": {"Content-Type": ["application/json"], **extra},
        "body": json.dumps({"error": error, "detail": public_detail(detail)}),
        "isBase64Encoded": False,
    }


def _unauthorized(detail: str) -> dict[str, Any]:
    return _proxy_error(401, Unauthorized.error, detail, {"WWW-Authenticate": 'Bearer realm="squall"'})


def _json_body(event: Event) -> bool:
    """True unless the request has a body that is declared as something other than JSON."""
    if not event.get("body"):
        return True
    declared = (_header(event, "content-type") or "application/json").split(";")[0].strip().lower()
    return declared == "application/json" or declared.endswith("+json")


def iam_principal(event: Event) -> str | None:
    """The IAM principal API Gateway verified for ``event``: REST v1 ``requestContext.identity.userArn``, HTTP
    v2 ``requestContext.authorizer.iam.userArn`` (None: not an IAM-authorized request)."""
    context = event.get("requestContext") or {}
    arn = (context.get("identity") or {}).get("userArn")
    if not arn:
        arn = ((context.get("authorizer") or {}).get("iam") or {}).get("userArn")
    return str(arn) if arn else None


def _forbidden(detail: str) -> dict[str, Any]:
    return _proxy_error(403, "Forbidden", detail)


def authenticate(users: Users, event: Event) -> User | dict[str, Any]:
    """The user of ``event``, or the 401/403 proxy response. An IAM principal (the deployed API) is looked up
    by ARN: a users file that names principals admits only those (403 for others); one that names none (or no
    users file) lets the bearer-token check decide, and with no tokens either the principal is a user of its
    own (an admin). Else the bearer token's hash picks the user (401 when missing or unknown)."""
    arn = iam_principal(event)
    if arn is not None:
        user = users.by_principal(arn)
        if user is not None:
            return user
        if any(u.iam_principals for u in users.users.values()):
            return _forbidden(f"IAM principal {arn} is not a user of this service (SQUALL_USERS)")
    if not users.need_token:
        if arn is not None:
            return User(arn, role="admin")
        if users:
            return _unauthorized("no user of this server matches the request")
        return ADMIN_ANONYMOUS
    given = _header(event, "authorization") or ""
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return _unauthorized("this server needs a bearer token (Authorization: Bearer <token>)")
    user = users.by_token(value.strip())
    return user if user is not None else _unauthorized("wrong token: no user of this server has it")


def make_handler(service: Service, app: APIGatewayRestResolver | None = None) -> Handler:
    """A Lambda-style ``handler(event, context)``: authentication (:func:`authenticate`: the request's user
    is left in the event under :data:`USER_KEY`), a JSON-only body check (415 otherwise), then the resolver.
    The OpenAPI document, ``/healthz`` and the console's static files need no token (the console sends it with
    its API calls)."""
    resolver = app or create_app(service)
    users = service.users

    def handler(event: Event, context: Any) -> dict[str, Any]:
        path = str(event.get("path") or "")
        public = path in _PUBLIC_PATHS or path.startswith("/console/")
        event.pop(USER_KEY, None)
        if not public:
            user = authenticate(users, event)
            if not isinstance(user, User):
                return user
            event[USER_KEY] = user
        if not _json_body(event):
            return _proxy_error(415, "UnsupportedMediaType", "send the body as application/json")
        return resolver.resolve(event, context)

    return handler
