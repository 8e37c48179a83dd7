"""A finished query's rows (Arrow) and statistics: :class:`Result`, shared by the embedded and remote SDK.

Conversions follow DuckDB's Python API: ``.df()`` gives the pandas types ``duckdb.sql(...).df()``
gives (DECIMAL → float64, DATE → datetime64, nullable integers → Int64 …), ``.arrow()``,
``.pl()`` (Polars), ``.show()`` prints DuckDB's box table, and ``repr()``/Jupyter show a preview.
``.write_parquet(path)`` (``.to_parquet``), ``.write_csv`` and ``.write_json`` write the rows with the write
path's own writer and commit (:func:`write_table`): a file, a folder of part files, or an ``s3://`` URL.

May import: :mod:`squall.plan`, :mod:`squall.errors`, :mod:`squall.formats`, :mod:`squall.aws`, and — when
writing — :mod:`squall.driver.write` and :mod:`squall.operators.write` (pandas, polars and duckdb lazily).
"""

from __future__ import annotations

import contextlib
import html
import io
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from squall import aws
from squall.errors import OptionError
from squall.plan import Plan

if TYPE_CHECKING:
    import pandas as pd

#: rows shown by ``repr()`` and in Jupyter
PREVIEW_ROWS = 10
#: ``mode`` of the write methods -> the COPY option it stands for
WRITE_MODES = {"overwrite": "OVERWRITE", "append": "APPEND", "error": ""}


class Result:
    """A finished query: the rows (Arrow) and the statistics of the run."""

    def __init__(self, table: pa.Table, stats: dict[str, Any], plan: Plan | None = None) -> None:
        self._table = table
        self.stats = stats
        self.plan = plan

    @property
    def columns(self) -> list[str]:
        return list(self._table.column_names)

    @property
    def num_rows(self) -> int:
        return self._table.num_rows

    def to_arrow(self) -> pa.Table:
        """The result as a ``pyarrow.Table`` (column names as the query wrote them)."""
        return self._table

    def arrow(self) -> pa.Table:
        """The result as a ``pyarrow.Table`` (same as :meth:`to_arrow`)."""
        return self._table

    def to_pandas(self) -> pd.DataFrame:
        """The result as a pandas DataFrame with DuckDB's types (needs pandas installed); see :meth:`df`."""
        return self.df()

    def df(self) -> pd.DataFrame:
        """The result as a pandas DataFrame, typed as ``duckdb.sql(...).df()`` types the same result."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise OptionError("df() needs pandas: pip install 'squall[pandas]'") from None
        from squall.formats import duck

        con = duck()
        try:
            return con.from_arrow(self._table).df()
        finally:
            con.close()

    def pl(self) -> Any:
        """The result as a Polars DataFrame (needs polars installed)."""
        try:
            import polars
        except ImportError:
            raise OptionError("pl() needs polars: pip install polars") from None
        return polars.from_arrow(self._table)

    def write_parquet(
        self,
        path: str,
        *,
        partition_by: Sequence[str] | None = None,
        compression: str | None = None,
        mode: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write the rows as Parquet to ``path``: a file, a folder (``out/``, or a folder that exists) of part
        files, or an ``s3://bucket/key`` URL; the same writer and commit as ``COPY … TO`` (see
        :func:`write_table`). ``partition_by``: hive ``key=value`` folders by these columns; ``compression``:
        snappy (default), zstd, gzip, …; ``mode``: ``overwrite`` (default for a file), ``append`` (add files
        to a folder) or ``error`` (default for a folder: it must be new or empty). Returns what was written:
        ``{"target", "files", "rows", "bytes", "paths"}``."""
        return write_table(self._table, path, "parquet", partition_by=partition_by, mode=mode,
                           options=_compression(compression), storage_options=storage_options)  # fmt: skip

    def to_parquet(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """Same as :meth:`write_parquet`."""
        return self.write_parquet(path, **kwargs)

    def write_csv(
        self,
        path: str,
        *,
        header: bool = True,
        delimiter: str = ",",
        partition_by: Sequence[str] | None = None,
        compression: str | None = None,
        mode: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write the rows as CSV to ``path`` (see :meth:`write_parquet`); a path ending in ``.gz`` (``.zst``) is
        compressed with gzip (zstd), or say ``compression="gzip"``."""
        options: dict[str, Any] = {"HEADER": header, "DELIMITER": delimiter, **_compression(compression)}
        return write_table(self._table, path, "csv", partition_by=partition_by, mode=mode, options=options,
                           storage_options=storage_options)  # fmt: skip

    def write_json(
        self,
        path: str,
        *,
        partition_by: Sequence[str] | None = None,
        compression: str | None = None,
        mode: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write the rows as JSON lines (one object per row) to ``path`` (see :meth:`write_csv`)."""
        return write_table(self._table, path, "json", partition_by=partition_by, mode=mode,
                           options=_compression(compression), storage_options=storage_options)  # fmt: skip

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Rows as Python tuples."""
        columns = [c.to_pylist() for c in self._table.columns]
        return list(zip(*columns)) if columns else []

    def _render(self, max_rows: int | None = None, max_width: int | None = None) -> str:
        """DuckDB's box rendering of the rows (names, types, values as DuckDB prints them)."""
        from squall.formats import duck

        con = duck()
        try:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                con.from_arrow(self._table).show(max_rows=max_rows, max_width=max_width)
            return buf.getvalue().rstrip("\n")
        finally:
            con.close()

    def show(self, max_rows: int | None = 40, max_width: int | None = None) -> None:
        """Print the rows as a table, as DuckDB's ``.show()`` does (first and last rows beyond ``max_rows``)."""
        if max_rows is not None and max_rows < 1:
            raise OptionError(f"max_rows must be at least 1, got {max_rows}")
        print(self._render(max_rows, max_width))

    def __len__(self) -> int:
        return self._table.num_rows

    def __repr__(self) -> str:
        head = f"<squall.Result {self._table.num_rows} rows x {self._table.num_columns} columns>"
        if self._table.num_columns == 0:
            return head
        return head + "\n" + self._render(PREVIEW_ROWS)

    def _repr_html_(self) -> str:
        """Jupyter: the first rows as an HTML table, with the column types and the row count."""
        from squall.formats import printable, sql_type

        shown = printable(self._table.slice(0, PREVIEW_ROWS))
        cells = [["NULL" if v is None else str(v) for v in c.to_pylist()] for c in shown.columns]
        out = ['<table class="squall-result">', "<thead><tr>"]
        for field in self._table.schema:
            name, kind = html.escape(field.name), html.escape(sql_type(field.type))
            out.append(f"<th>{name}<br><small>{kind}</small></th>")
        out.append("</tr></thead><tbody>")
        for i in range(shown.num_rows):
            out.append("<tr>" + "".join(f"<td>{html.escape(col[i])}</td>" for col in cells) + "</tr>")
        out.append("</tbody></table>")
        n = self._table.num_rows
        more = f", {n - shown.num_rows} not shown" if n > shown.num_rows else ""
        out.append(f"<p>{n} row{'s' if n != 1 else ''} x {self._table.num_columns} columns{more}</p>")
        return "".join(out)


def _compression(codec: str | None) -> dict[str, Any]:
    return {} if codec is None else {"COMPRESSION": codec}


def output_target(path: str) -> tuple[str, str]:
    """Where a write the caller named explicitly goes: ``(target, root)``. ``target`` is an absolute path or an
    ``s3://`` URL, ending in ``/`` for a folder (a path ending in ``/``, or a local folder that exists);
    ``root`` is the folder that holds it, the one location made writable for that write (its staging folder
    ``.squall-staging/`` lives there while the write runs). OptionError for what cannot be a target."""
    text = str(path).strip()
    if not text:
        raise OptionError("empty output path")
    folder = text.endswith("/")
    if aws.is_s3_url(text):
        bucket, key = aws.parse_s3_url(text, OptionError, "output location")
        key = key.strip("/")
        if not key:
            raise OptionError(
                f"output {text!r}: name a file or a folder inside the bucket (s3://{bucket}/out/)"
            )
        parent = key.rpartition("/")[0]
        return (
            f"s3://{bucket}/{key}{'/' if folder else ''}",
            f"s3://{bucket}/{parent + '/' if parent else ''}",
        )
    if "://" in text and not text.startswith("file://"):
        raise OptionError(f"output {text!r}: only local paths and s3:// URLs can be written")
    local = os.path.abspath(os.path.expanduser(text.removeprefix("file://")))
    if os.path.dirname(local) == local:
        raise OptionError(f"output {text!r}: name a file or a folder, not the root folder")
    root = os.path.realpath(os.path.dirname(local))
    folder = folder or os.path.isdir(local)
    return os.path.join(root, os.path.basename(local)) + ("/" if folder else ""), root.rstrip("/") + "/"


def write_table(
    table: pa.Table,
    path: str,
    fmt: str | None,
    *,
    options: Mapping[str, Any] | None = None,
    partition_by: Sequence[str] | None = None,
    mode: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``table`` (rows already in this process) to ``path`` as ``fmt`` (None: from the extension, else
    Parquet) with the write path's own parts:
    the options checked as a COPY's (:mod:`squall.driver.write.options`), the rows written by DuckDB's COPY into
    a staging folder as one rank would (:func:`squall.operators.write.write_part`), then committed
    (:mod:`squall.driver.write.commit`: a file renamed or copied into place, a folder's parts made visible
    together); a failure leaves nothing at the target. ``path``: see :func:`output_target`; ``mode``:
    :data:`WRITE_MODES` (default: ``overwrite`` for a file, ``error`` for a folder). Returns ``{"target",
    "files", "rows", "bytes", "paths"}``."""
    from squall.driver.write.jobs import files_job
    from squall.driver.write.locations import STAGING, Writable
    from squall.driver.write.statements import WriteStatement
    from squall.operators.write import write_part

    target, root = output_target(path)
    if partition_by:
        target = target.rstrip("/") + "/"
    chosen = (mode or ("error" if target.endswith("/") else "overwrite")).lower()
    if chosen not in WRITE_MODES:
        raise OptionError(f"mode must be one of {', '.join(WRITE_MODES)}, not {mode!r}")
    names = [n.lower() for n in table.column_names]
    if len(set(names)) != len(names):
        raise OptionError("the result has two columns of one name: name them apart (… AS other) to write it")
    opts: dict[str, Any] = {**({"FORMAT": fmt} if fmt else {}), **(options or {})}
    if partition_by:
        opts["PARTITION_BY"] = tuple(partition_by)
    if WRITE_MODES[chosen]:
        opts[WRITE_MODES[chosen]] = True
    elif target.endswith("/"):  # the Python wording of COPY's "already exists"
        from squall.operators.sinks import sink_for

        if any(STAGING not in p for p in sink_for(target, storage_options).list_under(target)):
            raise OptionError(f"{target} already holds files: pass mode='overwrite' (replace them) or "
                              "mode='append' (add files)")  # fmt: skip
    job = files_job(WriteStatement("copy", "", target, opts), Writable([root]), storage_options)
    assert job.spec is not None
    for key in job.spec.partition_by:
        if key not in table.column_names:
            raise OptionError(
                f"partition_by column {key!r} is not a column ({', '.join(table.column_names)})"
            )
    write_id = f"w{uuid.uuid4().hex[:16]}"
    try:
        manifest, _rows = write_part(table, job.spec, job.sink, write_id, 0, threads=os.cpu_count() or 1)
        committed = job.commit(manifest, table.num_rows, write_id)
    except BaseException:
        with contextlib.suppress(Exception):
            job.abort(write_id)
        raise
    return committed.to_dict()
