"""The ``squall`` command line.

    squall query SQL | -f FILE --data DIR|s3://… [--workers W] [--format table|csv|json|parquet]
                 [--output FILE|DIR/|s3://…] [--writable LOC …] [--stats-json FILE] [--exchange local|s3://bucket/prefix]
                 [--exchange-levels 1|2|auto] [--scan parquet|s3select]
                 [--platform local|lambda-local|lambda|fabric] [--fanout F] [--function NAME]
                 [--provider tcp|shm|efa] [--catalog NAME=PROPS …]
    squall explain SQL | -f FILE --data DIR [--workers W] [--analyze] [--writable LOC …]
    squall gen-tpch --sf SF --out DIR [--parts N] [--skew jcch [--hot-share H] [--hot-keys K] [--zipf Z]
                 [--hot-orders K] [--order-zipf Z] [--seed N] [--correlate-dates]]
    squall gen-tpcds --sf SF --out DIR
    squall tables --data DIR [--catalog NAME=PROPS …] | --endpoint URL
    squall serve --data DIR|s3://… [--catalog NAME=PROPS …] [--port P] [--token T] [--workers W] [--state DIR|s3://…]
                 [--writable LOC …] [--max-running N] [--max-queued N] [--fast-lane-bytes SIZE]
                 [--max-scan-bytes SIZE] [--max-result-rows N] [--max-result-bytes SIZE] [--max-run-time DURATION]
                 [--fixed-workers] [--users FILE] [--audit-log FILE]

``query``, ``explain`` and ``tables`` run embedded with ``--data`` or against a service with
``--endpoint URL [--token T | --auth iam]`` (the token defaults to ``$SQUALL_TOKEN``).

Defaults: ``--data`` from ``$SQUALL_DATA``, else from a config file (the first of ``./squall.toml``
and ``~/.config/squall/config.toml``, ``$XDG_CONFIG_HOME`` honoured) with keys ``data``, ``workers``,
``platform``, ``writable`` (a list of folders or ``s3://`` prefixes; ``--writable`` replaces it) and
``[catalogs.NAME]`` tables of pyiceberg catalog properties (``--catalog NAME=…`` wins for its name), and for
``serve`` a ``[service]`` table (scheduler, worker pool and per-query limits: :mod:`squall.service.settings`;
``audit_log``) and ``[users.NAME]`` tables (:mod:`squall.service.users`; ``--users FILE`` replaces them);
flags win over both.

Writes: ``COPY``, ``UNLOAD``, ``CREATE TABLE AS``, ``INSERT INTO`` and ``DROP TABLE`` run where ``--writable``
(or the config's ``writable``) allows, and print a one-row summary (status, rows, files, bytes, target).
``query --output TARGET`` runs ``COPY (SQL) TO TARGET`` — every worker writes its part, the driver never holds
the rows — with TARGET's folder writable for that run: a file (``.gz`` compressed), a folder ``out/`` of part
files, or ``s3://bucket/key``; the format from ``--format``, else from the extension (Parquet by default). ``squall --version``; ``-v``/``-vv`` or ``--log-level LEVEL``
log on stderr; ``SQUALL_DEBUG=1`` logs at debug level and shows the traceback of internal errors.

A user error prints one line ``error: …`` on stderr and exits 1; never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any, NoReturn

from squall.errors import OptionError, SquallError, UserError
from squall.version import __version__

if TYPE_CHECKING:
    import pyarrow as pa

TABLE_ROWS = 40
#: config files for defaults (``data``, ``workers``, ``platform``), the first that exists wins
CONFIG_KEYS = ("data", "workers", "platform", "catalogs", "writable", "service", "users")
LOG_LEVELS = ("debug", "info", "warning", "error")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OptionError(message)


def _log_args(sp: argparse.ArgumentParser, top: bool) -> None:
    # on the top parser and on every command (squall -v query … and squall query -v …)
    default = 0 if top else argparse.SUPPRESS
    sp.add_argument("-v", "--verbose", action="count", default=default, help="log on stderr (-vv: debug)")
    sp.add_argument(
        "--log-level", choices=LOG_LEVELS, default=None if top else argparse.SUPPRESS,
        help="log level on stderr (SQUALL_DEBUG=1: debug, and tracebacks of internal errors)",
    )  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    from squall.driver.catalog.scan_kinds import scan_kinds
    from squall.driver.platforms.base import PLATFORMS

    p = _Parser(
        prog="squall",
        description="SQL over Parquet, distributed over W workers.",
        epilog="Defaults for --data/--workers/--platform: $SQUALL_DATA, ./squall.toml, "
        "~/.config/squall/config.toml (keys data, workers, platform).",
    )
    p.add_argument("--version", action="version", version=f"squall {__version__}")
    _log_args(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def sql_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("sql", nargs="?", help="the query text (or use -f)")
        sp.add_argument("-f", "--file", help="read the query from FILE ('-' for stdin)")
        sp.add_argument(
            "--data",
            help="folder or s3://bucket/prefix of <table>.parquet or <table>/ tables, or one .parquet file "
            "(default: $SQUALL_DATA or the config file; none: queries that read no table)",
        )
        catalog_args(sp)
        sp.add_argument(
            "--workers", type=_workers_arg, default=None,
            help="number of workers (default: cores), or auto: the scale model picks W per query on the "
            "lambda platforms (the cores on local)",
        )  # fmt: skip
        sp.add_argument(
            "--worker-memory", metavar="SIZE", default=None,
            help="memory budget of each local worker, e.g. 512MB: DuckDB spills to disk past its share and a "
            "stage that cannot fit fails with a clear error (default: the machine's memory shared by the "
            "workers and the driver)",
        )  # fmt: skip
        endpoint_args(sp)

    def catalog_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--catalog", action="append", default=None, metavar="NAME=PROPS",
            help="a named Iceberg catalog, its tables NAME.<namespace>.<table> in SQL: pyiceberg's catalog "
            'properties as JSON (lake=\'{"type": "sql", "uri": "sqlite:///c.db"}\') or key=value,… '
            "(lake=type=sql,uri=sqlite:///c.db); repeatable; also [catalogs.NAME] in squall.toml",
        )  # fmt: skip

    def writable_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--writable", action="append", default=None, metavar="LOC",
            help="a folder or s3://bucket/prefix/ that COPY, CREATE TABLE AS and INSERT may write to (repeatable "
            "or comma-separated; also writable = [...] in squall.toml); nothing writable: every write is refused",
        )  # fmt: skip

    def endpoint_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--endpoint", help="URL of a Squall service (squall serve, API Gateway) instead of --data"
        )
        sp.add_argument("--token", default=None, help="bearer token for --endpoint (default: $SQUALL_TOKEN)")
        sp.add_argument(
            "--auth", choices=["token", "iam"], default=None, help="iam: sign requests with SigV4"
        )

    q = sub.add_parser("query", help="run a query and print or write its result")
    sql_args(q)
    writable_args(q)
    q.add_argument(
        "--format", choices=["table", "csv", "json", "parquet"], default=None,
        help="table (default), csv or json on stdout; with --output: parquet, csv or json (default: from the "
        "extension, else parquet)",
    )  # fmt: skip
    q.add_argument(
        "--output", metavar="TARGET",
        help="write the result to a file, a folder (out/: one part file per worker) or s3://bucket/key instead of "
        "stdout, written by the workers (COPY); .gz: gzip",
    )  # fmt: skip
    q.add_argument("--stats-json", help="write the query statistics as JSON to FILE")
    q.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    q.add_argument(
        "--max-rows", type=int, default=TABLE_ROWS, help=f"rows --format table prints (default {TABLE_ROWS})"
    )
    q.add_argument("--timeout", type=float, default=None, help="cancel the query after this many seconds")
    # --- S3 data and exchange (issue 4) ---
    q.add_argument("--exchange", default=None, help="local (default) or s3://bucket/prefix (S3 exchange)")
    q.add_argument(
        "--exchange-levels",
        choices=["1", "2", "auto"],
        default=None,
        help="S3 exchange levels (default auto)",
    )
    q.add_argument(
        "--scan",
        choices=scan_kinds(),
        default=None,
        help="how workers read tables (default parquet; s3select: scan S3 tables with S3 Select)",
    )

    # --- platforms (issue 5) ---
    q.add_argument(
        "--platform", choices=PLATFORMS.names(), default=None,
        help="where the workers run: local processes (default), the local Lambda emulator, AWS Lambda, "
        "or ranks exchanging over libfabric",
    )  # fmt: skip
    q.add_argument(
        "--provider",
        default=None,
        help="fabric: libfabric provider, tcp (default), shm or efa ($FI_PROVIDER)",
    )
    q.add_argument("--fanout", type=int, default=None, help="lambda: invocation tree fan-out (default ⌈√W⌉)")
    q.add_argument(
        "--function", default=None, help="lambda: the worker function (default $SQUALL_WORKER_FUNCTION)"
    )

    e = sub.add_parser("explain", help="print the distributed plan")
    sql_args(e)
    writable_args(e)
    e.add_argument(
        "--estimate", action="store_true",
        help="add the scale model's predicted time, cost, S3 requests and memory per worker on the platform "
        "(local: on Lambda; lambda needs no bucket or function for it)",
    )  # fmt: skip
    e.add_argument(
        "--analyze", action="store_true",
        help="run the query too and add per-exchange rows per rank and skew (max/mean)",
    )  # fmt: skip
    e.add_argument(
        "--platform", choices=PLATFORMS.names(), default=None, help="the platform to plan and price for"
    )
    e.add_argument(
        "--exchange", default=None, help="lambda platforms: s3://bucket/prefix (default $SQUALL_BUCKET)"
    )

    g = sub.add_parser("gen-tpch", help="write TPC-H tables as Parquet (tpchgen-cli)")
    g.add_argument("--sf", type=float, required=True, help="scale factor, e.g. 0.1, 1, 10")
    g.add_argument("--out", required=True, help="output folder")
    g.add_argument(
        "--parts", type=int, default=None, help="split each table into N files (<table>/*.parquet)"
    )
    g.add_argument("--force", action="store_true", help="overwrite a folder holding another scale factor")
    g.add_argument(
        "--skew", choices=["jcch"], default=None,
        help="JCC-H-style skewed keys (squall/tpch/skew.py: hot orders/customers/parts, Zipf, date-correlated keys)",
    )  # fmt: skip
    g.add_argument(
        "--hot-share", type=float, default=None, help="--skew: share of rows on hot keys (default 0.3)"
    )
    g.add_argument(
        "--hot-keys", type=int, default=None, help="--skew: number of hot keys per column (default 1)"
    )
    g.add_argument(
        "--zipf", type=float, default=None, help="--skew: Zipf exponent of the other keys (default 0: off)"
    )
    g.add_argument(
        "--hot-orders",
        type=int,
        default=None,
        help="--skew: hot orders the hot lineitems fall on (default: --hot-keys)",
    )
    g.add_argument(
        "--order-zipf",
        type=float,
        default=None,
        help="--skew: Zipf exponent of the order keys (default: --zipf)",
    )
    g.add_argument("--seed", type=int, default=None, help="--skew: seed of the hash-based draws (default 0)")
    g.add_argument(
        "--correlate-dates",
        action="store_true",
        help="--skew: order keys follow o_orderdate (fuzzy co-location)",
    )
    gd = sub.add_parser("gen-tpcds", help="write the 24 TPC-DS tables as Parquet (DuckDB's dsdgen)")
    gd.add_argument("--sf", type=float, required=True, help="scale factor, at least 0.01 (e.g. 0.1, 1)")
    gd.add_argument("--out", required=True, help="output folder (<table>.parquet)")
    # --- service: tables, serve ---
    t = sub.add_parser("tables", help="list the tables and their columns")
    t.add_argument("--data", help="folder of <table>.parquet files or <table>/ folders, or one .parquet file")
    catalog_args(t)
    endpoint_args(t)
    t.add_argument("--format", choices=["table", "json"], default="table")

    s = sub.add_parser("serve", help="run the REST API locally (same API as the deployed service)")
    s.add_argument("--data", help="folder or s3://bucket/prefix with the tables (default: $SQUALL_DATA)")
    catalog_args(s)
    writable_args(s)
    s.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    s.add_argument("--port", type=int, default=8080, help="port (0: any free port; default 8080)")
    s.add_argument("--token", default=None, help="require 'Authorization: Bearer T' (default: $SQUALL_TOKEN)")
    s.add_argument(
        "--platform", choices=PLATFORMS.names(), default=None, help="where queries run (default: local)"
    )
    s.add_argument("--workers", type=int, default=None, help="workers per query (default: cores)")
    s.add_argument(
        "--state", default=None, help="query state: a folder or s3://bucket/prefix (default: temp)"
    )
    s.add_argument("--inline-limit", type=int, default=None, help="results up to this many bytes go inline")
    s.add_argument(
        "--access-log", action="store_true", help="log every request on stderr (time, client, user)"
    )
    s.add_argument(
        "--users", metavar="FILE",
        help="TOML file of [users.NAME] tables: hashed tokens, roles, own limits, catalogs (default: "
        "[users.*] of squall.toml)",
    )  # fmt: skip
    s.add_argument(
        "--audit-log", metavar="FILE",
        help="append a JSON line per submitted and per ended query (- : stdout; default: [service] audit_log)",
    )  # fmt: skip
    s.add_argument(
        "--result-ttl", default="24h", metavar="DURATION",
        help="delete finished queries and their results this long after they end (e.g. 30m, 24h, 7d; "
        "off: keep them; default 24h)",
    )  # fmt: skip
    _service_args(s)
    for command in sub.choices.values():
        _log_args(command, top=False)
    return p


def _service_args(s: argparse.ArgumentParser) -> None:
    """``serve``'s scheduler and limits (also the ``[service]`` table of squall.toml; squall/service/settings.py)."""
    g = s.add_argument_group("scheduling and limits", "also [service] in squall.toml; 'off' lifts a limit")
    g.add_argument(
        "--max-running", type=int, metavar="N", help="queries running at once (default: 2 per core)"
    )
    g.add_argument("--max-queued", type=int, metavar="N", help="queries waiting; more get 429 (default 64)")
    g.add_argument(
        "--fast-lane-bytes", metavar="SIZE",
        help="queries whose plan reads at most this run in the fast lane, beside long ones (default 16MiB)",
    )  # fmt: skip
    g.add_argument(
        "--max-scan-bytes", metavar="SIZE", help="refuse a query whose plan reads more (default 100GiB)"
    )
    g.add_argument(
        "--worker-memory", metavar="SIZE",
        help="memory budget of each pool worker, e.g. 1GB: DuckDB spills past its share and a stage that cannot "
        "fit fails with a clear error (default: the machine's memory shared by the pool and the server)",
    )  # fmt: skip
    g.add_argument(
        "--max-result-rows", type=_count_or_off, metavar="N",
        help="refuse larger results: write them with COPY or squall query --output (default 10000000)",
    )  # fmt: skip
    g.add_argument("--max-result-bytes", metavar="SIZE", help="likewise in bytes (default 256MiB)")
    g.add_argument(
        "--max-run-time", metavar="DURATION", help="stop a query running longer (e.g. 90s, 30m; default 30m)"
    )
    g.add_argument(
        "--fixed-workers", action="store_true",
        help="every query runs on --workers W, however busy the server (default: under load a query that names "
        "no W runs on fewer, cores // queries at hand)",
    )  # fmt: skip


def _count_or_off(text: str) -> int | str:
    if text.strip().lower() == "off":
        return "off"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or off, got {text!r}") from None


def _read_sql(args: argparse.Namespace) -> str:
    if args.sql and args.file:
        raise OptionError("give the query as an argument or with -f, not both")
    if args.file:
        if args.file == "-":
            return sys.stdin.read()
        try:
            with open(args.file, encoding="utf-8") as fh:
                return fh.read()
        except OSError as err:
            raise OptionError(f"cannot read {args.file}: {err.strerror}") from None
    if not args.sql:
        raise OptionError("no query: pass SQL as an argument or use -f FILE")
    return args.sql


def _workers_arg(text: str) -> int | str:
    """``--workers``: a number or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, got {text!r}") from None


def _check_workers(workers: int | str | None) -> None:
    """Only the lower bound: the upper one is the platform's (local: 8 per core, at most 256; lambda:
    ``SQUALL_MAX_WORKERS``; a server: its own ``--workers``), and its message says why."""
    if workers == "auto" or isinstance(workers, str):
        return
    if workers is not None and workers < 1:
        raise OptionError(f"--workers must be at least 1, got {workers}")


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]query"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        transient=True, console=Console(stderr=True),  # on stderr: stdout carries the result
    ) as bar:  # fmt: skip
        task = bar.add_task("planning", total=1.0)

        def update(state: Any) -> None:
            done = sum(1 for n in state.done.values() if n >= state.world_size)
            bar.update(task, completed=state.fraction, description=f"stage {done}/{state.stages}")

        yield update


def _format_table(table: pa.Table, out: IO[str], max_rows: int = TABLE_ROWS) -> None:
    import pyarrow as pa

    from squall.formats import printable

    names = table.column_names
    shown = printable(table.slice(0, max_rows))
    cols = [[("NULL" if v is None else str(v)) for v in c.to_pylist()] for c in shown.columns]
    widths = [max([len(n)] + [len(v) for v in col]) for n, col in zip(names, cols)]
    numeric = [pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
               for f in table.schema]  # fmt: skip

    def line(values: Sequence[str]) -> str:
        cells = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return " | ".join(cells).rstrip()

    out.write(line(names) + "\n")
    out.write("-+-".join("-" * w for w in widths) + "\n")
    for i in range(shown.num_rows):
        out.write(line([c[i] for c in cols]) + "\n")
    more = table.num_rows - shown.num_rows
    suffix = f", {more} not shown (use --max-rows N, --format csv or --output)" if more > 0 else ""
    out.write(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''}{suffix})\n")


def _write_result(table: pa.Table, fmt: str, max_rows: int = TABLE_ROWS) -> None:
    """Print ``table`` on stdout as ``fmt`` (table, csv or json)."""
    import pyarrow as pa

    from squall.formats import json_value, printable

    if fmt in ("csv", "json"):
        table = printable(table)  # INTERVAL and BLOB as DuckDB prints them
    if fmt == "csv":
        import pyarrow.csv as pcsv

        sink = pa.BufferOutputStream()
        pcsv.write_csv(table, sink)
        sys.stdout.write(sink.getvalue().to_pybytes().decode())
    elif fmt == "json":
        rows = [{k: json_value(v) for k, v in row.items()} for row in table.to_pylist()]
        json.dump(rows, sys.stdout, indent=None)
        sys.stdout.write("\n")
    else:
        _format_table(table, sys.stdout, max_rows)


def _check_output(path: str | None, flag: str) -> None:
    """Fail before the query runs when the file ``path`` cannot be written."""
    if not path:
        return
    if os.path.isdir(path):
        raise OptionError(f"{flag} {path} is a folder")
    _check_parent(path, flag)


def _check_parent(path: str, flag: str) -> None:
    parent = os.path.dirname(os.path.abspath(path.rstrip("/")))
    if not os.path.isdir(parent):
        raise OptionError(f"cannot write {flag} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise OptionError(f"cannot write {flag} {path}: permission denied")


class _Output:
    """``query --output``: where the result goes and how (checked before the query runs)."""

    def __init__(self, output: str, fmt: str | None) -> None:
        from squall.operators.sinks import sink_for
        from squall.result import output_target

        if fmt == "table":
            raise OptionError(
                "--format table prints on the terminal: with --output give --format parquet, csv or json "
                "(or leave it out: the extension decides, Parquet by default)"
            )
        self.given, self.format = output, fmt
        self.target, self.root = output_target(output)
        self.folder = self.target.endswith("/")
        if not self.target.startswith("s3://"):
            _check_parent(self.target, "--output")
        if self.folder and any(
            ".squall-staging" not in p for p in sink_for(self.target).list_under(self.target)
        ):
            raise OptionError(f"--output {output} already holds files: give a new or empty folder")

    @property
    def options(self) -> dict[str, Any]:
        """The COPY options: FORMAT when given; a file is replaced (as a file written by the CLI always was);
        JSON in one file is an array of rows, as on stdout (JSON lines in a folder's parts)."""
        options: dict[str, Any] = {} if self.format is None else {"FORMAT": self.format}
        if not self.folder:
            options["OVERWRITE"] = True
            if self.format == "json" or (self.format is None and _extension_format(self.target) == "json"):
                options["ARRAY"] = True
        return options

    def copy_sql(self, sql: str) -> str:
        """``COPY (sql) TO 'target' (…)``; OptionError when ``sql`` is a write statement itself."""
        from squall.driver.frontend.parse import parse
        from squall.driver.write.statements import parse_write

        if parse_write(sql) is not None:
            raise OptionError("--output writes the result of a query: a write statement names its own target")
        parse(sql)  # a syntax error where the user's text has it
        body = sql.strip().rstrip(";").rstrip()
        rendered = ", ".join(f"{k} {'true' if v is True else v}" for k, v in self.options.items())
        target = self.target.replace("'", "''")
        return f"COPY (\n{body}\n) TO '{target}'" + (f" ({rendered})" if rendered else "")

    def write_here(self, table: pa.Table) -> dict[str, Any]:
        """A remote result, already here: written by this process (the same writer and commit)."""
        from squall.result import write_table

        options = {k: v for k, v in self.options.items() if k not in ("FORMAT", "OVERWRITE")}
        return write_table(table, self.target, self.format, options=options)


def _extension_format(target: str) -> str:
    from squall.driver.write.options import write_options

    return write_options({}, target).format


def _summary_line(written: dict[str, Any]) -> str:
    files, size = int(written.get("files", 0)), int(written.get("bytes", 0))
    rows = int(written.get("rows", 0))
    return (f"wrote {rows:,} row{'s' if rows != 1 else ''} to {written.get('target')} "
            f"({files} file{'s' if files != 1 else ''}, {_human_bytes(size)})")  # fmt: skip


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _query(args: argparse.Namespace) -> int:
    sql = _read_sql(args)
    _check_workers(args.workers)
    if args.max_rows < 1:
        raise OptionError(f"--max-rows must be at least 1, got {args.max_rows}")
    if args.timeout is not None and not args.timeout > 0:
        raise OptionError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.format == "parquet" and not args.output:
        raise OptionError("--format parquet needs --output FILE")
    output = _Output(args.output, args.format) if args.output else None
    _check_output(args.stats_json, "--stats-json")
    if output is not None and not args.endpoint:
        sql = output.copy_sql(sql)  # the workers write it: the driver never holds the rows
        args.output_root = output.root
    show = not args.no_progress and sys.stderr.isatty()
    _log().debug("query: data=%s endpoint=%s workers=%s platform=%s", args.data, args.endpoint, args.workers,
                 args.platform)  # fmt: skip
    with _connect(args) as con, _progress(show) as progress:
        if args.timeout is None:
            result = con.sql(sql, progress=progress)
        elif args.endpoint:
            result = con.sql(sql, progress=progress, timeout_s=args.timeout)
        else:
            result = con.sql(sql, progress=progress, timeout=args.timeout)
    stats = result.stats
    _log().info("query %s: %s rows in %.3f s (planning %.3f s)", stats.get("query_id"), stats.get("rows"),
                stats.get("elapsed_s", 0.0), stats.get("planning_s", 0.0))  # fmt: skip
    if output is None:
        _write_result(result.to_arrow(), args.format or "table", args.max_rows)
    else:
        written = stats.get("written") if not args.endpoint else output.write_here(result.to_arrow())
        stats["rows"] = int((written or {}).get("rows", 0))  # the query's rows, not the COPY's summary row
        print(_summary_line(written or {}), file=sys.stderr)
    if args.stats_json:
        try:
            with open(args.stats_json, "w", encoding="utf-8") as fh:
                json.dump(result.stats, fh, indent=2, default=str)
        except OSError as err:
            raise OptionError(f"cannot write {args.stats_json}: {err.strerror}") from None
    cost = result.stats.get("cost_usd")
    if cost is not None:  # Lambda platforms price every query
        print(f"cost: ${cost:.6f} (Lambda and S3 requests; details: --stats-json)", file=sys.stderr)
    return 0


def _explain(args: argparse.Namespace) -> int:
    import squall

    sql = _read_sql(args)
    _check_workers(args.workers)
    if args.endpoint and args.analyze:
        raise OptionError(
            "explain --analyze runs embedded (--data); against a service use query --stats-json"
        )
    if args.endpoint:
        with _connect(args) as remote:
            print(remote.explain(sql, estimate=args.estimate))
        return 0
    _need_data(args)
    options: dict[str, Any] = {}
    if args.platform:
        options["platform"] = args.platform
    if args.exchange:
        options["exchange"] = args.exchange
    con = squall.Connection(
        data=args.data, workers=args.workers, **options, **_catalog_options(args), **_writable_options(args)
    )
    try:
        print(con.explain(sql, estimate=args.estimate))
        if args.analyze:
            from squall.driver.report.exchanges import format_exchanges

            print()
            print(format_exchanges(con.sql(sql).stats))
    finally:
        con.close()
    return 0


def _gen_tpch(args: argparse.Namespace) -> int:
    from squall import tpch

    skew_flags = {
        "hot_share": args.hot_share,
        "hot_keys": args.hot_keys,
        "zipf": args.zipf,
        "hot_orders": args.hot_orders,
        "order_zipf": args.order_zipf,
        "seed": args.seed,
    }
    given = {k: v for k, v in skew_flags.items() if v is not None}
    if args.skew is None:
        if given or args.correlate_dates:
            raise OptionError(
                "--hot-share, --hot-keys, --zipf, --hot-orders, --order-zipf, --seed and --correlate-dates need --skew jcch"
            )
        files = tpch.generate(args.sf, args.out, args.parts, force=args.force)
    else:
        from squall.tpch.skew import SkewSpec, generate_skewed

        spec = SkewSpec(**given, correlate_dates=args.correlate_dates)
        files = generate_skewed(args.sf, args.out, spec, args.parts, force=args.force)
    print(f"wrote {len(files)} files to {args.out}", file=sys.stderr)
    return 0


def _gen_tpcds(args: argparse.Namespace) -> int:
    from squall import tpcds

    files = tpcds.generate(args.sf, args.out)
    print(f"wrote {len(files)} files to {args.out}", file=sys.stderr)
    return 0


# --- service: remote connections, tables, serve ---


def _need_data(args: argparse.Namespace, required: bool = False) -> None:
    """--data and --endpoint exclude each other; ``required``: one of them (or a catalog) must be given (tables,
    serve); queries without either run embedded over no tables (``SELECT 1``)."""
    if (args.data or getattr(args, "catalogs", None)) and args.endpoint:
        raise OptionError("give --data/--catalog (embedded) or --endpoint (remote), not both")
    if required and not args.data and not args.endpoint and not getattr(args, "catalogs", None):
        raise OptionError(
            "give --data DIR (embedded) or --endpoint URL (a Squall service), or set SQUALL_DATA"
        )


def _connect(args: argparse.Namespace) -> Any:
    """An embedded Connection for --data, or a RemoteConnection for --endpoint."""
    import squall

    _need_data(args)
    if args.endpoint:
        if not args.endpoint.lower().startswith(("http://", "https://")):
            raise OptionError(f"--endpoint must be an http(s):// URL, got {args.endpoint!r}")
        if getattr(args, "worker_memory", None):
            raise OptionError(
                "--worker-memory is for embedded runs (--data): a service sizes its own workers"
            )
        return squall.connect(args.endpoint, token=args.token, auth=args.auth, workers=args.workers)
    workers = getattr(args, "workers", None)
    if workers is None and not args.data and getattr(args, "platform", None) in (None, "local"):
        workers = 1  # no tables: nothing to distribute, one worker process starts fastest
    return squall.connect(
        data=args.data,
        workers=workers,
        **_s3_options(args),
        **_platform_options(args),
        **_catalog_options(args),
        **_writable_options(args),
        **({"worker_memory": args.worker_memory} if getattr(args, "worker_memory", None) else {}),
    )


def _catalog_options(args: argparse.Namespace) -> dict[str, Any]:
    """connect() keywords for ``--catalog`` and the config file's ``[catalogs.NAME]``: ``{"catalogs": …}``."""
    catalogs = getattr(args, "catalogs", None)
    return {"catalogs": catalogs} if catalogs else {}


def _writable_options(args: argparse.Namespace) -> dict[str, Any]:
    """connect() keywords for ``--writable`` (or the config's ``writable``), plus the folder of ``--output``."""
    writable = list(getattr(args, "writables", None) or [])
    if getattr(args, "output_root", None):
        writable.append(args.output_root)
    return {"writable": writable} if writable else {}


#: platform options the query command takes as flags: constructor keyword -> flag
PLATFORM_FLAGS = {"fanout": "--fanout", "function": "--function", "provider": "--provider"}


def _platform_options(args: argparse.Namespace) -> dict[str, Any]:
    """connect() keywords for ``query --platform/--fanout/--function/--provider``, checked against the
    platform's capabilities (``options``, ``needs_s3_location``)."""
    from squall.driver.platforms.base import platform_class

    platform = getattr(args, "platform", None) if args.command == "query" else None
    given = {opt: getattr(args, opt, None) for opt in PLATFORM_FLAGS}
    given = {opt: value for opt, value in given.items() if value is not None and value != ""}
    cls = platform_class(platform) if platform else None
    for opt in given:
        if cls is None or opt not in cls.options:
            raise OptionError(_flags_need_platform(opt))
    if cls is None:
        return {}
    options: dict[str, Any] = {"platform": platform}
    s3_exchange = (getattr(args, "exchange", None) or "").startswith("s3://")
    if cls.needs_s3_location and not s3_exchange and not os.environ.get("SQUALL_BUCKET"):
        raise OptionError(f"--platform {platform} needs --exchange s3://bucket/prefix (or SQUALL_BUCKET)")
    if given:
        options["platform_options"] = given
    return options


def _flags_need_platform(option: str) -> str:
    """One line: the flags that go with ``option``'s platforms, e.g. "--provider needs --platform fabric"."""
    from squall.driver.platforms.base import PLATFORMS, platform_class

    takes = {name: platform_class(name).options for name in PLATFORMS.names()}
    platforms = [name for name, opts in takes.items() if option in opts]
    flags = [flag for opt, flag in PLATFORM_FLAGS.items()
             if [name for name, opts in takes.items() if opt in opts] == platforms]  # fmt: skip
    verb = "needs" if len(flags) == 1 else "need"
    return f"{' and '.join(flags)} {verb} --platform {' or '.join(platforms)}"


def _s3_options(args: argparse.Namespace) -> dict[str, Any]:
    """connect() keywords for ``query --exchange/--exchange-levels/--scan``."""
    options: dict[str, Any] = {}
    exchange, levels = getattr(args, "exchange", None), getattr(args, "exchange_levels", None)
    if levels is not None and not (exchange or "").startswith("s3://"):
        raise OptionError("--exchange-levels needs --exchange s3://bucket/prefix")
    if exchange:
        options["exchange"] = exchange
        if levels is not None:
            options["exchange_options"] = {"levels": levels}
    if getattr(args, "scan", None):
        options["scan"] = args.scan
    return options


def _tables(args: argparse.Namespace) -> int:
    from squall.formats import sql_type_of_name
    from squall.service.backend import describe_tables

    _need_data(args, required=True)
    args.workers = None
    with _connect(args) as con:
        tables = con.describe() if args.endpoint else describe_tables(con)
    if args.format == "json":
        json.dump(tables, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for t in tables:
        rows = "?" if t.get("rows") is None else f"{t['rows']:,}"
        print(
            f"{t['name']} ({rows} rows)"
            + _source_text(t)
            + (f"  error: {t['error']}" if t.get("error") else "")
        )
        for c in t["columns"]:
            kind = sql_type_of_name(c["type"])  # DuckDB's SQL names: BIGINT, DECIMAL(15,2), DATE, VARCHAR
            print(f"  {c['name']:<24} {kind}{'' if c['nullable'] else ' not null'}")
    return 0


def _source_text(table: dict[str, Any]) -> str:
    """What ``squall tables`` says of a table besides rows: its format when not plain Parquet, its partitioning
    and snapshot (``  iceberg, partitioned by month(o_orderdate), snapshot 123``)."""
    fmt = table.get("format")
    if fmt in (None, "parquet") and not table.get("partitioning") and table.get("snapshot") is None:
        return ""
    parts = [str(fmt or "parquet")]
    if table.get("partitioning"):
        parts.append("partitioned by " + ", ".join(table["partitioning"]))
    if table.get("snapshot") is not None:
        parts.append(f"{'version' if fmt == 'delta' else 'snapshot'} {table['snapshot']}")
    return "  " + ", ".join(parts)


def _serve(args: argparse.Namespace) -> int:
    if not args.data and not args.catalogs:
        raise OptionError("squall serve needs --data DIR|s3://… (or SQUALL_DATA) or --catalog NAME=…")
    _check_workers(args.workers)
    if not 0 <= args.port <= 65535:
        raise OptionError(f"--port must be between 0 and 65535, got {args.port}")
    try:
        from squall.service.server import serve
        from squall.service.service import DEFAULT_INLINE_LIMIT, parse_ttl
    except ImportError as err:
        raise OptionError(f"squall serve needs the aws extra (pip install 'squall[aws]'): {err}") from None
    if args.inline_limit is not None and args.inline_limit < 0:
        raise OptionError("--inline-limit must be >= 0")
    from squall.service.settings import ServiceSettings

    flags = {key: getattr(args, key) for key in ("max_running", "max_queued", "fast_lane_bytes", "max_scan_bytes",
                                                 "max_result_rows", "max_result_bytes")}  # fmt: skip
    flags["max_run_time"] = args.max_run_time
    flags["adaptive_workers"] = False if args.fixed_workers else None
    flags["audit_log"] = args.audit_log
    flags["worker_memory"] = args.worker_memory
    settings = ServiceSettings.load(args.service, flags, args.config_path or "squall.toml")
    users = _users(args)
    serve(
        data=args.data,
        catalogs=args.catalogs,
        writable=args.writables,
        host=args.host,
        port=args.port,
        token=args.token or os.environ.get("SQUALL_TOKEN") or None,
        platform=args.platform or "local",
        workers=args.workers,
        state=args.state,
        inline_limit=DEFAULT_INLINE_LIMIT if args.inline_limit is None else args.inline_limit,
        access_log=args.access_log,
        result_ttl_s=parse_ttl(args.result_ttl),
        settings=settings,
        users=users,
        audit_log=settings.audit_log,
    )
    return 0


def _users(args: argparse.Namespace) -> Any:
    """``serve``'s users: ``--users FILE``, else the config file's ``[users.NAME]`` tables (none: no users)."""
    from squall.service.users import Users

    if args.users:
        return Users.from_file(args.users)
    return Users.load(args.config_users, f"config file {args.config_path}")


def _config() -> tuple[dict[str, Any], str | None]:
    """The defaults of the first config file that exists, and its path."""
    home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    for path in ("squall.toml", os.path.join(home, "squall", "config.toml")):
        if not os.path.isfile(path):
            continue
        import tomllib

        try:
            with open(path, "rb") as fh:
                config = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise OptionError(f"cannot read config file {path}: {err}") from None
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        if unknown:
            raise OptionError(
                f"config file {path}: unknown key {unknown[0]!r} (keys: {', '.join(CONFIG_KEYS)})"
            )
        _log().debug("config file %s: %s", path, config)
        return config, path
    return {}, None


def _apply_defaults(args: argparse.Namespace) -> None:
    """Flags win; then $SQUALL_DATA (data only); then the config file."""
    if args.command not in ("query", "explain", "tables", "serve"):
        return
    config, path = _config()
    if getattr(args, "endpoint", None):
        if getattr(args, "catalog", None):
            raise OptionError(
                "--catalog is for embedded connections (--data); a service has its own catalogs"
            )
        if getattr(args, "writable", None):
            raise OptionError(
                "--writable is for embedded connections (--data); a service has its own writable locations "
                "(squall serve --writable)"
            )
        return
    if not args.data:
        args.data = os.environ.get("SQUALL_DATA") or config.get("data") or None
        if args.data is not None and not isinstance(args.data, str):
            raise OptionError(f"config file {path}: data must be a string")
    if hasattr(args, "workers") and args.workers is None and "workers" in config:
        if not isinstance(config["workers"], int) or isinstance(config["workers"], bool):
            raise OptionError(f"config file {path}: workers must be an integer")
        args.workers = config["workers"]
    if hasattr(args, "platform") and args.platform is None and "platform" in config:
        args.platform = str(config["platform"])
    if hasattr(args, "catalog"):
        args.catalogs = _catalogs(args.catalog or [], config.get("catalogs", {}), path)
    if hasattr(args, "writable"):
        args.writables = _writables(args.writable, config.get("writable"), path)
    if args.command == "serve":
        args.service, args.config_path, args.config_users = config.get("service"), path, config.get("users")


def _writables(flags: list[str] | None, configured: Any, path: str | None) -> list[str]:
    """The writable locations: ``--writable`` flags (each may list several, comma-separated), else the config
    file's ``writable`` (a list, or one comma-separated text)."""
    from squall.driver.write.locations import writable_list

    if flags:
        return [loc for flag in flags for loc in writable_list(flag)]
    if configured is None:
        return []
    if isinstance(configured, str) or (
        isinstance(configured, list) and all(isinstance(v, str) for v in configured)
    ):
        return writable_list(configured)
    raise OptionError(f"config file {path}: writable must be a list of folders or s3:// prefixes")


def _catalogs(flags: list[str], configured: Any, path: str | None) -> dict[str, dict[str, str]] | None:
    """The named catalogs: the config file's ``[catalogs.NAME]`` tables, each ``--catalog NAME=…`` replacing its
    name's."""
    from squall.driver.catalog.catalogs import parse_catalog_flag

    if not isinstance(configured, dict) or not all(isinstance(v, dict) for v in configured.values()):
        raise OptionError(
            f"config file {path}: catalogs must be tables [catalogs.NAME] of catalog properties"
        )
    out = {str(name): {str(k): str(v) for k, v in props.items()} for name, props in configured.items()}
    for flag in flags:
        name, props = parse_catalog_flag(flag)
        out[name] = props
    return out or None


def _log() -> Any:
    import logging

    return logging.getLogger("squall.cli")


def _setup_logging(args: argparse.Namespace) -> None:
    level = args.log_level
    if level is None and args.verbose:
        level = "info" if args.verbose == 1 else "debug"
    if level is None and os.environ.get("SQUALL_DEBUG"):
        level = "debug"
    if level is None:
        return
    import logging

    logging.basicConfig(
        level=getattr(logging, level.upper()), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``squall`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["--version"], ["-V"]):  # without building the parser (it imports the platforms)
        print(f"squall {__version__}")
        return 0
    try:
        args = _parser().parse_args(argv)
        _setup_logging(args)
        _apply_defaults(args)
        handler = {"query": _query, "explain": _explain, "gen-tpch": _gen_tpch, "tables": _tables,
                   "serve": _serve, "gen-tpcds": _gen_tpcds}[args.command]  # fmt: skip
        return handler(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except SquallError as err:
        print(f"error: {err}", file=sys.stderr)
        if os.environ.get("SQUALL_DEBUG"):
            raise
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug outside planning: one line here, the traceback in the log file
        if os.environ.get("SQUALL_DEBUG"):
            raise
        from squall.driver.frontend.boundary import internal_error

        print(f"error: {internal_error('running the command', ' '.join(argv), exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
