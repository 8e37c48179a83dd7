"""A write's options, checked: DuckDB's COPY options Squall passes to the writers, and the ones it acts on.

Every option is checked against a list (a name not on it is a one-line OptionError naming it), and its value
is rendered as a SQL literal here, so the ``COPY`` a worker runs (``squall.operators.write``) is Squall's
own text. ``FORMAT`` defaults to the target's extension (``.parquet``, ``.csv``, ``.json``/``.jsonl``/``.ndjson``,
each optionally ``.gz``/``.zst``), else Parquet (DuckDB would pick CSV). A target ending in ``/`` — or any
PARTITION_BY, PER_THREAD_OUTPUT or FILE_SIZE_BYTES — is a folder of part files written by every rank; any
other target is one file, written by one rank.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.errors import OptionError

FORMATS = {"parquet": "parquet", "csv": "csv", "json": "json", "jsonl": "json", "ndjson": "json"}
#: what an existing target may become: error (DuckDB's default), overwrite, append
MODES = ("OVERWRITE", "OVERWRITE_OR_IGNORE", "APPEND")

_COMPRESSIONS = {
    "parquet": {"snappy", "zstd", "gzip", "lz4", "lz4_raw", "brotli", "uncompressed"},
    "csv": {"gzip", "zstd", "none", "uncompressed", "auto"},
    "json": {"gzip", "zstd", "none", "uncompressed", "auto"},
}
_SUFFIX = {"gzip": ".gz", "zstd": ".zst"}
#: option -> (formats it applies to, kind of value)
_PASSED: dict[str, tuple[tuple[str, ...], str]] = {
    "COMPRESSION": (("parquet", "csv", "json"), "word"),
    "COMPRESSION_LEVEL": (("parquet",), "int"),
    "ROW_GROUP_SIZE": (("parquet",), "int"),
    "ROW_GROUP_SIZE_BYTES": (("parquet",), "size"),
    "ROW_GROUPS_PER_FILE": (("parquet",), "int"),
    "FILE_SIZE_BYTES": (("parquet", "csv", "json"), "size"),
    "WRITE_PARTITION_COLUMNS": (("parquet", "csv", "json"), "bool"),
    "HEADER": (("csv",), "bool"),
    "DELIMITER": (("csv",), "text"),
    "QUOTE": (("csv",), "text"),
    "ESCAPE": (("csv",), "text"),
    "NULLSTR": (("csv",), "text"),
    "DATEFORMAT": (("csv", "json"), "text"),
    "TIMESTAMPFORMAT": (("csv", "json"), "text"),
    "ARRAY": (("json",), "bool"),
}
_ALIASES = {"DELIM": "DELIMITER", "SEP": "DELIMITER", "NULL": "NULLSTR", "PARTITIONED_BY": "PARTITION_BY",
            "CODEC": "COMPRESSION"}  # fmt: skip
_SIZE = re.compile(r"^\s*\d+(\.\d+)?\s*([kmgt]i?b|b|bytes)?\s*$", re.I)


@dataclass(frozen=True)
class WriteOptions:
    """What the options of one write say (see module doc)."""

    format: str
    passed: tuple[tuple[str, str], ...]  # (NAME, SQL literal) for DuckDB's COPY
    partition_by: tuple[str, ...]
    single_file: bool
    extension: str
    mode: str  # "" (the target must not exist), OVERWRITE, OVERWRITE_OR_IGNORE or APPEND


def write_options(options: Mapping[str, Any], target: str, *, what: str = "COPY") -> WriteOptions:
    """Check ``options`` of a write to ``target``; OptionError naming the first bad one."""
    opts = {_ALIASES.get(k.upper(), k.upper()): v for k, v in options.items()}
    fmt = _format(opts.pop("FORMAT", None), target, what)
    partition_by = tuple(opts.pop("PARTITION_BY", ()) or ())
    per_thread = _flag(opts.pop("PER_THREAD_OUTPUT", False), "PER_THREAD_OUTPUT", what)
    modes = [m for m in MODES if _flag(opts.pop(m, False), m, what)]
    if len(modes) > 1:
        raise OptionError(f"{what}: choose one of {', '.join(modes)}")
    extension = opts.pop("FILE_EXTENSION", None)
    if "FILENAME_PATTERN" in opts:
        raise OptionError(f"{what} option FILENAME_PATTERN: Squall names the part files itself "
                          "(part-<query>-r<rank>-a<attempt>-<n>)")  # fmt: skip
    passed = []
    for name, value in opts.items():
        if name not in _PASSED:
            known = ", ".join(
                sorted(["FORMAT", "PARTITION_BY", "PER_THREAD_OUTPUT", "FILE_EXTENSION", *MODES, *_PASSED])
            )
            raise OptionError(f"{what} option {name} is not supported (supported: {known})")
        formats, kind = _PASSED[name]
        if fmt not in formats:
            raise OptionError(f"{what} option {name} does not apply to FORMAT {fmt}")
        passed.append((name, _literal(name, value, kind, fmt, what)))
    compression = str(opts.get("COMPRESSION", "")).lower()
    folder = target.endswith("/") or bool(partition_by) or per_thread or "FILE_SIZE_BYTES" in opts
    if extension is None:
        extension = fmt + (_SUFFIX.get(compression, "") if fmt != "parquet" else "")
    return WriteOptions(
        fmt, tuple(passed), partition_by, not folder, str(extension).lstrip("."), modes[0] if modes else ""
    )


def _format(value: Any, target: str, what: str) -> str:
    if value is None:
        name = target.rstrip("/").rpartition("/")[2].lower()
        for suffix in (".gz", ".zst", ".gzip", ".zstd"):
            name = name.removesuffix(suffix)
        ext = name.rpartition(".")[2] if "." in name else ""
        return FORMATS.get(ext, "parquet")
    fmt = FORMATS.get(str(value).lower())
    if fmt is None:
        raise OptionError(f"{what} FORMAT {value!r} is not supported (parquet, csv or json)")
    return fmt


def _flag(value: Any, name: str, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, str)) and str(value).lower() in ("1", "0", "true", "false"):
        return str(value).lower() in ("1", "true")
    raise OptionError(f"{what} option {name} takes true or false, not {value!r}")


def _literal(name: str, value: Any, kind: str, fmt: str, what: str) -> str:
    """``value`` as the SQL literal DuckDB's COPY reads; OptionError when it is not of ``kind``."""
    if kind == "bool":
        return "true" if _flag(value, name, what) else "false"
    if kind == "int":
        if isinstance(value, bool) or (not isinstance(value, int) and not str(value).isdigit()):
            raise OptionError(f"{what} option {name} takes a whole number, not {value!r}")
        return str(int(value))
    if kind == "size":
        if isinstance(value, bool) or not _SIZE.match(str(value)):
            raise OptionError(f"{what} option {name} takes a size such as 100000 or '64MB', not {value!r}")
        return str(value) if isinstance(value, int) else _quote(str(value))
    if kind == "word":
        word = str(value).lower()
        if word not in _COMPRESSIONS[fmt]:
            raise OptionError(
                f"{what} COMPRESSION {value!r} for {fmt}: one of {', '.join(sorted(_COMPRESSIONS[fmt]))}"
            )
        return _quote(word)
    if not isinstance(value, str):
        raise OptionError(f"{what} option {name} takes a text in quotes, not {value!r}")
    return _quote(value)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
