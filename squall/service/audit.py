"""The audit trail: one JSON line when a query is submitted and one when it ends.

``squall serve --audit-log FILE`` (or ``audit_log`` in ``[service]``; ``-`` is stdout) appends to FILE; on the
deployed functions the lines go to stdout, which is CloudWatch Logs (``SQUALL_AUDIT_LOG``: ``stdout``, the
default there, a file, or ``off``). Every line::

    {"time": "2026-11-27T23:59:01.123Z", "event": "submit", "user": "alice", "query_id": "q…",
     "sql": "SELECT …", "status": "queued", "rows": null, "bytes_scanned": null, "cost_usd": null,
     "client": "203.0.113.7"}

``event`` is ``submit`` (status ``queued``), ``end`` (``succeeded``, ``failed`` or ``cancelled``, with rows,
bytes scanned and cost when known, and ``error``) or ``refused`` (a submission refused before it was stored:
a limit, a table the user may not read, a full queue; no query id). The SQL is the query's whole text. No line
holds a token or any other credential: users are named, never their tokens.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import threading
from typing import IO, Any

from squall.errors import OptionError
from squall.service.errors import public_detail

STDOUT = ("-", "stdout")


def utc_now() -> str:
    """The time now as UTC ISO 8601 with milliseconds (``2026-11-27T23:59:01.123Z``)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    """Appends audit lines to a file or a stream; safe for many threads (one write per line)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._fh: IO[str] | None = None
        if target not in STDOUT:
            try:
                self._fh = open(target, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in close()
            except OSError as err:
                raise OptionError(f"cannot open the audit log {target}: {err.strerror}") from None

    @classmethod
    def from_env(cls) -> AuditLog | None:
        """The deployed functions' audit log: ``SQUALL_AUDIT_LOG`` (default ``stdout``; ``off``: none)."""
        target = (os.environ.get("SQUALL_AUDIT_LOG") or "stdout").strip()
        return None if target.lower() in ("off", "none") else cls(target)

    def write(self, event: str, **fields: Any) -> None:
        """One line: ``time``, ``event``, then ``fields``."""
        line = json.dumps({"time": utc_now(), "event": event, **fields}, default=str)
        with self._lock:
            stream = self._fh if self._fh is not None else sys.stdout
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):  # a full disk or a closed stdout must not fail the query
                pass

    def submitted(self, request: dict[str, Any], query_id: str) -> None:
        """The line of an accepted query (its request as stored)."""
        self.write("submit", user=request.get("user"), query_id=query_id, sql=request.get("sql"),
                   status="queued", rows=None, bytes_scanned=None, cost_usd=None,
                   client=request.get("client"))  # fmt: skip

    def refused(self, user: str, sql: str, client: str | None, error: str, detail: str) -> None:
        """The line of a submission refused before it was stored (nothing runs)."""
        self.write("refused", user=user, query_id=None, sql=sql, status="refused", rows=None,
                   bytes_scanned=None, cost_usd=None, client=client,
                   error={"error": error, "detail": public_detail(detail)})  # fmt: skip

    def ended(self, request: dict[str, Any], doc: dict[str, Any]) -> None:
        """The line of a query that ended: ``doc`` is its final status document."""
        stats = doc.get("stats") or {}
        rows = (doc.get("result") or {}).get("rows")
        written = doc.get("written")
        if rows is None and isinstance(written, dict):
            rows = written.get("rows")
        error = doc.get("error")
        if isinstance(error, dict):
            error = {"error": error.get("error"), "detail": public_detail(str(error.get("detail", "")))}
        self.write("end", user=request.get("user") or doc.get("user"), query_id=doc.get("query_id"),
                   sql=request.get("sql") or doc.get("sql"), status=doc.get("status"), rows=rows,
                   bytes_scanned=stats.get("bytes_scanned"), cost_usd=stats.get("cost_usd"),
                   client=request.get("client"), error=error if error else None)  # fmt: skip

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
