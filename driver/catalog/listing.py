"""Table file listing: the one place that says which files a table location names.

A location is one file, a folder (every visible Parquet file below it, at any
depth), or a glob with ``*``, ``?``, ``[...]`` in any path component and ``**``
for any number of folders (``data/events/year=*/part-*.parquet``). The same
rules hold on every storage: a location is resolved with the two listing calls
of :class:`squall.operators.storage.Storage` (``file_entry``, ``list_folder``),
so local folders and object-store prefixes (``s3://bucket/t/``) behave alike.

- A folder's files are those whose name ends with one of ``suffixes``
  (``.parquet``) and starts with neither ``.`` nor ``_`` (``_SUCCESS``,
  ``.crc`` files), sorted by path.
- A glob matches component by component like :func:`glob.glob` (a wildcard
  does not match a name starting with ``.``); any matching file counts,
  whatever its suffix.
- Requests: one listing of the folder before the first glob component (only
  its own files when the glob is in the last component); a file costs one
  lookup (a HEAD on S3), a folder named without its ``/`` one lookup more.

:func:`list_tables` finds the tables in a data folder the same way.

A folder that is an Iceberg table (``metadata/*.metadata.json``) or a Delta table (``_delta_log/``) is never
read as plain Parquet files: its folder holds the files of every version, removed and rewritten ones included,
so such a location is refused (:func:`lake_format`) until a table source reads it through its own log.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence

from squall.errors import DataError, NotSupportedError
from squall.operators.storage import FileEntry, Storage, scheme_of

_MAGIC = re.compile(r"[*?\[]")
#: a valid table name
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PARQUET = (".parquet",)


def is_glob(location: str) -> bool:
    """Whether ``location`` holds a glob character (``*``, ``?`` or ``[``)."""
    return _MAGIC.search(location) is not None


def visible(path: str, suffixes: Sequence[str] = PARQUET) -> bool:
    """Whether a file found in a folder belongs to the table: a data suffix, not hidden (``.``/``_``)."""
    name = path.rpartition("/")[2]
    return name.endswith(tuple(suffixes)) and not name.startswith((".", "_"))


def list_entries(
    storage: Storage, location: str, *, suffixes: Sequence[str] = PARQUET, what: str = "Parquet"
) -> list[FileEntry]:
    """The files of table location ``location`` with their sizes and stamps, sorted by path.

    DataError ``table location not found`` when nothing is there, ``no <what> files at`` when
    the folder or glob holds no file of the table.
    """
    path = location.removeprefix("file://") if scheme_of(location) == "file" else location
    if is_glob(path):
        entries = _glob(storage, path)
    elif path.endswith("/"):
        entries = _folder(storage, path, suffixes, location)
    else:
        one = storage.file_entry(path)
        entries = [one] if one is not None else _folder(storage, path + "/", suffixes, location)
    if not entries:
        raise DataError(f"no {what} files at {location}")
    return sorted(entries, key=lambda e: e.path)


def list_files(
    storage: Storage, location: str, *, suffixes: Sequence[str] = PARQUET, what: str = "Parquet"
) -> list[str]:
    """The paths of :func:`list_entries`."""
    return [e.path for e in list_entries(storage, location, suffixes=suffixes, what=what)]


def _folder(storage: Storage, folder: str, suffixes: Sequence[str], location: str) -> list[FileEntry]:
    entries = storage.list_folder(folder, recursive=True)
    if entries is None:
        raise DataError(f"table location not found: {location}")
    refuse_lake_table(location, [e.path[len(folder) :] for e in entries])
    return [e for e in entries if visible(e.path, suffixes)]


#: the table formats whose folders are not plain Parquet files, and what marks their folder
LAKE_FORMATS = {
    "iceberg": "an Iceberg table (metadata/*.metadata.json)",
    "delta": "a Delta table (_delta_log/)",
}


def lake_format(paths: Sequence[str]) -> str | None:
    """``iceberg`` or ``delta`` when ``paths`` (relative to a folder) show the folder is such a table; else None."""
    for path in paths:
        head, sep, rest = path.partition("/")
        if sep and head == "_delta_log" and "/" not in rest:
            return "delta"
        if sep and head == "metadata" and rest.endswith(".metadata.json") and "/" not in rest:
            return "iceberg"
    return None


def nested_lake_table(paths: Sequence[str]) -> tuple[str, str] | None:
    """(its folder, relative, and format) of the first Iceberg or Delta table *below* a folder whose files'
    ``paths`` (relative to it) are given; None when there is none (the folder itself: :func:`lake_format`)."""
    for path in paths:
        parts = path.split("/")
        if len(parts) < 3:  # <table>/_delta_log/<file> or <table>/metadata/<file> at least
            continue
        marker, name = parts[-2], parts[-1]
        if marker == "_delta_log":
            return "/".join(parts[:-2]), "delta"
        if marker == "metadata" and name.endswith(".metadata.json"):
            return "/".join(parts[:-2]), "iceberg"
    return None


def refuse_lake_table(location: str, paths: Sequence[str]) -> None:
    """NotSupportedError when the folder at ``location`` (its files' ``paths`` relative to it) is a lake table
    registered as plain files, or holds one below it: read as plain Parquet files, its folder would give the
    rows of every version, deleted and rewritten ones included."""
    fmt = lake_format(paths)
    if fmt is not None:
        raise NotSupportedError(
            f"{location} is {LAKE_FORMATS[fmt]}, never read as plain Parquet files (they hold every version's rows): "
            f"register it with format={fmt!r} or name its folder in --data"
        )
    nested = nested_lake_table(paths)
    if nested is not None:
        folder, fmt = nested
        raise NotSupportedError(
            f"{location} holds {LAKE_FORMATS[fmt]} at {folder}/: query that table (its folder or its catalog), "
            "not the folder around it (as plain Parquet files it would give the rows of every version)"
        )


def _glob(storage: Storage, path: str) -> list[FileEntry]:
    """The files matching a glob: one listing of the folder before its first glob component."""
    first = _MAGIC.search(path)
    assert first is not None
    base = path[: path.rfind("/", 0, first.start()) + 1]
    patterns = path[len(base) :].split("/")
    recursive = len(patterns) > 1 or "**" in patterns
    entries = storage.list_folder(base, recursive=recursive) or []
    return [e for e in entries if _matches(e.path[len(base) :].split("/"), patterns)]


def _matches(names: Sequence[str], patterns: Sequence[str]) -> bool:
    """Whether path components ``names`` match glob components ``patterns`` (``**``: any number)."""
    if not patterns:
        return not names
    head, rest = patterns[0], patterns[1:]
    if head == "**":
        for skip in range(len(names) + 1):
            if _matches(names[skip:], rest):
                return True
            if skip < len(names) and names[skip].startswith("."):
                return False
        return False
    return bool(names) and _match_one(names[0], head) and _matches(names[1:], rest)


def _match_one(name: str, pattern: str) -> bool:
    if name.startswith(".") and not pattern.startswith(".") and is_glob(pattern):
        return False  # like glob.glob: wildcards do not match hidden names
    return fnmatch.fnmatchcase(name, pattern)


def table_name(stem: str) -> str:
    """A valid table name from a file or folder name (other characters become ``_``)."""
    name = re.sub(r"\W", "_", stem) or "t"
    return name if not name[0].isdigit() else "t_" + name


#: file suffixes of each plain-file table format, as ``--data`` finds ``<table><suffix>`` files
FILE_FORMATS: dict[str, tuple[str, ...]] = {
    "parquet": PARQUET,
    "csv": (".csv", ".csv.gz", ".csv.zst", ".tsv", ".tsv.gz"),
    "json": (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz"),
}


def file_format(path: str) -> tuple[str, str] | None:
    """(format, suffix) of a data file by its name (``orders.csv.gz``: ``("csv", ".csv.gz")``); None if not one."""
    name = path.rpartition("/")[2]
    for fmt, suffixes in FILE_FORMATS.items():
        for suffix in sorted(suffixes, key=len, reverse=True):
            if name.endswith(suffix) and len(name) > len(suffix):
                return fmt, suffix
    return None


def list_tables(storage: Storage, folder: str) -> list[tuple[str, str, str]]:
    """(name, location, format) of the tables in data folder ``folder``, sorted by name; one recursive listing.

    Tables are ``<name>.parquet``, ``<name>.csv[.gz|.zst]`` and ``<name>.json|.jsonl|.ndjson[.gz]``
    files (:data:`FILE_FORMATS`) and ``<name>/`` folders: an Iceberg table (``iceberg``), a Delta
    table (``delta``), or visible data files at any depth, hive partitions included (the format of
    its first file). Names are SQL identifiers not starting with ``.`` or ``_``; a file wins over a
    folder of the same name. An object-store folder's location keeps its ``/`` (naming a prefix
    then costs no lookup). When there are none but the folder itself holds data files or
    partitions (``year=2024/``), or is an Iceberg or Delta table, it is one table, named after it.
    [] when the folder holds no data file.
    """
    local = scheme_of(folder) == "file"
    folder = folder.removeprefix("file://") if local else folder
    base = folder if folder.endswith("/") else folder + "/"
    listed = sorted(storage.list_folder(base, recursive=True) or [], key=lambda e: e.path)
    relative = [e.path[len(base) :] for e in listed]
    stem = os.path.basename(os.path.normpath(folder)) if local else folder.rstrip("/").rpartition("/")[2]
    whole = lake_format(relative)
    if whole is not None:  # the folder is one lake table
        return [(table_name(stem), folder if local else base, whole)]
    files: dict[str, tuple[str, str]] = {}
    folders: dict[str, list[str]] = {}
    whole_fmt = None
    for path in relative:
        first, sep, rest = path.partition("/")
        if sep:
            folders.setdefault(first, []).append(rest)
            if "=" in first and whole_fmt is None and visible(path, _SUFFIXES) and (f := file_format(path)):
                whole_fmt = f[0]
        elif visible(path, _SUFFIXES) and (f := file_format(path)):
            name = first[: -len(f[1])]
            files.setdefault(name, (base + first, f[0]))
            whole_fmt = whole_fmt or f[0]
    found: dict[str, tuple[str, str]] = {}
    for name, (location, fmt) in files.items():
        if NAME.match(name) and not name.startswith("_"):
            found[name] = (location, fmt)
    for name, paths in folders.items():
        if not NAME.match(name) or name.startswith("_") or name in found:
            continue
        folder_fmt = lake_format(paths) or next(
            (f[0] for p in paths if visible(p, _SUFFIXES) and (f := file_format(p))), None
        )
        if folder_fmt is not None:
            found[name] = (base + name if local else base + name + "/", folder_fmt)
    if not found and whole_fmt is not None:
        return [(table_name(stem), folder if local else base, whole_fmt)]
    if whole_fmt is not None and any("=" in name for name in folders):  # a hive-partitioned folder
        return [(table_name(stem), folder if local else base, whole_fmt)]
    return sorted((name, location, fmt) for name, (location, fmt) in found.items())


_SUFFIXES = tuple(suffix for suffixes in FILE_FORMATS.values() for suffix in suffixes)
