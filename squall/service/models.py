"""Pydantic models of the REST API's bodies (they also make its OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ResultFormat = Literal["arrow", "parquet", "csv", "json"]
Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
MAX_SQL = 1_000_000
#: History items show the SQL cut to this many characters.
SQL_PREVIEW = 200


class QueryRequest(BaseModel):
    """``POST /v1/queries``."""

    model_config = ConfigDict(extra="forbid")

    sql: str = Field(
        min_length=1,
        max_length=MAX_SQL,
        description="one SELECT/WITH query, or a write statement (COPY, UNLOAD, CREATE TABLE AS, INSERT INTO, "
        "DROP TABLE) to a location the server declares writable",
    )
    workers: int | None = Field(
        default=None, ge=1, le=1024, description="workers to run on (default: server's)"
    )
    format: ResultFormat | None = Field(
        default=None,
        description="result format prepared when the query finishes (Arrow is always kept); also what "
        "GET …/result answers when neither ?format= nor Accept names one",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, le=86400, description="cancel the query after this long"
    )


class ExplainRequest(BaseModel):
    """``POST /v1/explain``."""

    model_config = ConfigDict(extra="forbid")

    sql: str = Field(min_length=1, max_length=MAX_SQL)
    workers: int | None = Field(default=None, ge=1, le=1024)
    estimate: bool = Field(
        default=False,
        description="add the scale model's predicted time, cost and S3 requests on the platform",
    )


class ErrorBody(BaseModel):
    """Every error: ``error`` is a squall.errors class name (or NotFound, Conflict, ValidationError, …)."""

    error: str
    detail: str


class QueryAccepted(BaseModel):
    query_id: str
    status: Status


class ProgressInfo(BaseModel):
    stages: int
    world_size: int
    stages_done: int
    ranks_done: dict[str, int] = Field(description="stage id -> ranks that finished it")
    fraction: float


class ResultInfo(BaseModel):
    rows: int
    columns: list[str]
    bytes: dict[str, int] = Field(description="size of the result in each format written so far")


class WrittenInfo(BaseModel):
    """What a write statement made visible (its ``stats["written"]`` has the files and the per-rank split)."""

    target: str = Field(description="the file, folder or table written")
    rows: int
    files: int
    bytes: int


class QueueInfo(BaseModel):
    """Where a queued query stands (``squall serve``; see :mod:`squall.service.scheduler`)."""

    position: int = Field(description="1, 2, … among every queued query, in submission order")
    ahead: int = Field(description="queries of its resource group that start before it")
    estimated_wait_s: float = Field(description="seconds until it starts, from its group's recent run times")
    group: str = Field(description="its resource group (fast: the fast lane; default: the others)")


class SchedulingInfo(BaseModel):
    """What the scheduler decided for a query that started (``squall serve``)."""

    group: str = Field(description="its resource group")
    workers: int = Field(description="the workers it runs on")
    load: int = Field(description="queries running or waiting (itself among them) when it started")
    workers_lowered: str | None = Field(
        default=None, description="why it runs on fewer workers than the server's default (adaptive_workers)"
    )


class QueryStatus(BaseModel):
    """``GET /v1/queries/{id}``."""

    query_id: str
    status: Status
    user: str | None = Field(default=None, description="who submitted it (the users file's name)")
    sql: str | None = None
    workers: int | None = None
    format: ResultFormat | None = None
    timeout_s: float | None = None
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cancel_requested: bool = False
    progress: ProgressInfo | None = None
    queue: QueueInfo | None = Field(default=None, description="a queued query: where it stands")
    scheduling: SchedulingInfo | None = Field(
        default=None, description="a started query: its group and workers"
    )
    error: ErrorBody | None = None
    stats: dict[str, Any] | None = Field(default=None, description="Result.stats of the finished query")
    result: ResultInfo | None = None
    written: WrittenInfo | None = Field(default=None, description="a write statement: what it wrote")


class ResultLink(BaseModel):
    """A large result: fetch ``url`` (presigned, no credentials needed) before it expires."""

    url: str
    expires_in: int
    format: ResultFormat
    bytes: int
    total_rows: int | None = Field(default=None, description="rows in the whole result")
    offset: int | None = Field(default=None, description="first row of this page")
    rows: int | None = Field(default=None, description="rows in this page")
    next: str | None = Field(default=None, description="the next page (null: this is the last)")


class QuerySummary(BaseModel):
    """One query of the history (``GET /v1/queries``)."""

    query_id: str
    status: Status
    user: str | None = Field(default=None, description="who submitted it")
    sql: str = Field(description=f"the query text, cut to {SQL_PREVIEW} characters")
    workers: int | None = None
    created_at: float | None = Field(default=None, description="submitted (seconds since the epoch)")
    started_at: float | None = None
    finished_at: float | None = None
    rows: int | None = Field(default=None, description="result rows (succeeded queries)")
    elapsed_s: float | None = None
    cost_usd: float | None = Field(default=None, description="what the query cost (Lambda platforms)")
    error: ErrorBody | None = None
    written: WrittenInfo | None = Field(default=None, description="a write statement: what it wrote")
    queue: QueueInfo | None = Field(default=None, description="a queued query: its place in the queue")


class QueryList(BaseModel):
    """``GET /v1/queries``: newest first."""

    queries: list[QuerySummary]
    next_page_token: str | None = Field(default=None, description="pass as ?page_token= for the next page")
    next: str | None = Field(default=None, description="the next page's path (null: this is the last)")


class WhoAmI(BaseModel):
    """``GET /v1/whoami``: the signed-in user (never a token or its hash)."""

    user: str
    role: Literal["user", "admin"]
    limits: dict[str, Any] = Field(
        description="the user's own limits (the users file); the server's apply too"
    )
    catalogs: list[str] | None = Field(default=None, description="what the user may read (null: everything)")


class Health(BaseModel):
    """``GET /healthz``."""

    status: Literal["ok"]
    version: str


class ColumnInfo(BaseModel):
    name: str
    type: str = Field(description="Arrow type")
    nullable: bool


class TableInfo(BaseModel):
    name: str
    columns: list[ColumnInfo]
    rows: int | None = None
    error: str | None = None
    format: str | None = Field(default=None, description="parquet, csv, json, iceberg, delta")
    partitioning: list[str] | None = Field(
        default=None, description="e.g. month(o_orderdate) (Iceberg tables)"
    )
    snapshot: int | None = Field(default=None, description="the current snapshot (Iceberg tables)")


class TablesResponse(BaseModel):
    tables: list[TableInfo]


class ExplainResponse(BaseModel):
    text: str = Field(description="the distributed plan: stages, exchanges, each stage's DuckDB SQL")
    plan: dict[str, Any] = Field(description="the plan as JSON (squall.plan.Plan.from_dict)")
    estimate: dict[str, Any] | None = Field(
        default=None,
        description="with estimate=true: {time_s, cost_usd, requests, profile, workers, label, memory_mb, "
        "budget_mb} from the scale "
        "model (on the local platform: what the plan would cost on Lambda at that W)",
    )
