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


def refuse_lake_table(location: str, paths: Sequence[str]) -> None:
    """NotSupportedError when the folder at ``location`` (its files' ``paths`` relative to it) is a lake table."""
    fmt = lake_format(paths)
    if fmt is not None:
        raise NotSupportedError(
            f"{location} is {LAKE_FORMATS[fmt]}: {fmt.title()} tables are not read yet (as plain Parquet files its "
            "folder would give the rows of every version, deleted and rewritten ones included)"
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


def list_tables(storage: Storage, folder: str) -> list[tuple[str, str]]:
    """(name, location) of the tables in data folder ``folder``, sorted by name; one recursive listing.

    Tables are ``<name>.parquet`` files and ``<name>/`` folders holding visible Parquet files
    at any depth (names that are SQL identifiers, not starting with ``.`` or ``_``; a file
    wins over a folder of the same name). An object-store folder's location keeps its ``/``
    (naming a prefix then costs no lookup). When there are none but the folder itself holds
    Parquet files or partitions (``year=2024/``), or is an Iceberg or Delta table, it is one table, named
    after it (a lake table is refused when it is read). [] when the folder holds no Parquet file.
    """
    local = scheme_of(folder) == "file"
    folder = folder.removeprefix("file://") if local else folder
    base = folder if folder.endswith("/") else folder + "/"
    found: dict[str, str] = {}
    whole = False
    listed = sorted(storage.list_folder(base, recursive=True) or [], key=lambda e: e.path)
    if lake_format([e.path[len(base) :] for e in listed]) is not None:  # the folder is one (refused) table
        whole, listed = True, []
    for entry in listed:
        if not visible(entry.path):
            continue
        first, sep, _rest = entry.path[len(base) :].partition("/")
        whole = whole or not sep or "=" in first
        name = first if sep else first.removesuffix(".parquet")
        if NAME.match(name) and not first.startswith((".", "_")):
            location = (base + first if local else base + first + "/") if sep else entry.path
            found.setdefault(name, location)
    if not found and whole:
        stem = os.path.basename(os.path.normpath(folder)) if local else folder.rstrip("/").rpartition("/")[2]
        return [(table_name(stem), folder if local else base)]
    return sorted(found.items())
