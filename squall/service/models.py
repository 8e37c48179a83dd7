"""Pydantic models of the REST API's bodies (they also make its OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ResultFormat = Literal["arrow", "parquet", "csv", "json"]
Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
MAX_SQL = 1_000_000


class QueryRequest(BaseModel):
    """``POST /v1/queries``."""

    model_config = ConfigDict(extra="forbid")

    sql: str = Field(min_length=1, max_length=MAX_SQL, description="one read-only SELECT/WITH query")
    workers: int | None = Field(
        default=None, ge=1, le=1024, description="workers to run on (default: server's)"
    )
    format: ResultFormat = Field(
        default="arrow", description="result format prepared when the query finishes"
    )
    timeout_s: float | None = Field(
        default=None, gt=0, le=86400, description="cancel the query after this long"
    )


class ExplainRequest(BaseModel):
    """``POST /v1/explain``."""

    model_config = ConfigDict(extra="forbid")

    sql: str = Field(min_length=1, max_length=MAX_SQL)
    workers: int | None = Field(default=None, ge=1, le=1024)


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


class QueryStatus(BaseModel):
    """``GET /v1/queries/{id}``."""

    query_id: str
    status: Status
    sql: str | None = None
    workers: int | None = None
    format: ResultFormat | None = None
    timeout_s: float | None = None
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cancel_requested: bool = False
    progress: ProgressInfo | None = None
    error: ErrorBody | None = None
    stats: dict[str, Any] | None = Field(default=None, description="Result.stats of the finished query")
    result: ResultInfo | None = None


class ResultLink(BaseModel):
    """A large result: fetch ``url`` (presigned, no credentials needed) before it expires."""

    url: str
    expires_in: int
    format: ResultFormat
    bytes: int


class ColumnInfo(BaseModel):
    name: str
    type: str = Field(description="Arrow type")
    nullable: bool


class TableInfo(BaseModel):
    name: str
    columns: list[ColumnInfo]
    rows: int | None = None
    error: str | None = None


class TablesResponse(BaseModel):
    tables: list[TableInfo]


class ExplainResponse(BaseModel):
    text: str = Field(description="the distributed plan: stages, exchanges, each stage's DuckDB SQL")
    plan: dict[str, Any] = Field(description="the plan as JSON (squall.plan.Plan.from_dict)")
