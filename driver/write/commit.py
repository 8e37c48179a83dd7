"""Committing a plain-files write once every rank succeeded, and cleaning up after one that failed.

The ranks' manifests (``squall.operators.write.MANIFEST``) name the files of the attempts the platform
accepted; only those become visible. Locally a new folder appears at once (the staged tree is renamed into
place; a folder it replaces is renamed aside first); files added to an existing folder are renamed one by one. On S3 each part is copied to its final key
(server-side, multipart when large), then the final listing ``_squall_commit_<query>`` (JSON) is written last
(readers that honour it see all parts or none; ``_`` names are hidden from Squall's and Athena's listings, and
without a data suffix no ``*.json``/``*.parquet`` glob of DuckDB's picks it up as data).
Afterwards — and after a failure — the query's staging folder is deleted with everything in it: parts of
failed, retried or duplicate attempts included.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from squall.driver.write.locations import STAGING
from squall.errors import OptionError
from squall.operators.sinks import Sink, move_all
from squall.operators.write import query_folder
from squall.plan import WriteSpec

#: the final listing of an S3 commit: this prefix and the query id (no suffix: never read as data)
LISTING = "_squall_commit_"


@dataclass
class Committed:
    """What a write made visible."""

    target: str
    files: list[str] = field(default_factory=list)
    rows: int = 0
    bytes: int = 0
    replaced: int = 0  # files removed by OVERWRITE

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "files": len(self.files), "rows": self.rows, "bytes": self.bytes,
                "replaced": self.replaced, "paths": self.files[:100]}  # fmt: skip


def check_target(
    sink: Sink,
    target: str,
    mode: str,
    single_file: bool,
    hint: str = "add OVERWRITE (replace it) or APPEND (add files) to the options",
) -> None:
    """Before anything runs: OptionError when ``target`` exists and ``mode`` does not say what to do
    (``hint``: what the statement could say instead)."""
    if single_file and mode == "APPEND":
        raise OptionError(f"APPEND adds files to a folder: end the target with '/' ({target}/)")
    if sink.scheme == "file":
        _local_shape(target.removeprefix("file://"), single_file)
    if not mode and _exists(sink, target):
        raise OptionError(f"{target} already exists: {hint}")


def _local_shape(target: str, single_file: bool) -> None:
    """OptionError when a local target cannot become what it is to be: a file where a folder is (or the
    other way round), or a folder below a file."""
    path = target.rstrip("/")
    if single_file and os.path.isdir(path):
        raise OptionError(f"{path} is a folder: end the target with '/' to write a folder of files there")
    if not single_file and os.path.isfile(path):
        raise OptionError(f"{path} is a file: a folder of files cannot be written there")
    parent = os.path.dirname(path)
    while parent and not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if parent and os.path.lexists(parent) and not os.path.isdir(parent):
        raise OptionError(f"{parent} is a file: {target} cannot be written below it")


def _exists(sink: Sink, target: str) -> bool:
    return sink.is_file(target.rstrip("/")) or any(
        STAGING not in p for p in sink.list_under(target.rstrip("/") + "/")
    )


def commit_files(
    spec: WriteSpec, manifest: pa.Table, sink: Sink, query_id: str, mode: str, rows: int
) -> Committed:
    """Make the accepted parts visible at ``spec.target`` (see module doc); the staging folder goes after."""
    target = spec.target
    paths = manifest.column("path").to_pylist()
    finals = [
        target if spec.single_file else target.rstrip("/") + "/" + rel
        for rel in manifest.column("relative").to_pylist()
    ]
    done = Committed(target, finals, rows, int(pc.sum(manifest.column("bytes")).as_py() or 0))
    if spec.single_file:
        sink.move(paths[0], target)
    else:
        old = [p for p in sink.list_under(target) if STAGING not in p] if mode == "OVERWRITE" else []
        if sink.scheme == "file" and old and not spec.staging.startswith(target):
            # a local folder replaced: the old one goes aside (into the query's staging folder, deleted with
            # it) and the new one is renamed into place, so no emptied partition folder of the old stays
            aside = query_folder(spec, query_id).removeprefix("file://") + "replaced"
            os.makedirs(os.path.dirname(aside), exist_ok=True)
            os.rename(target.rstrip("/"), aside)
            done.replaced, old = len(old), []
        if sink.scheme == "file" and not os.path.exists(target.rstrip("/")):
            _rename_tree(paths, finals, target, spec, query_id)
            sink.count("rename")
        else:
            move_all(sink, zip(paths, finals))
        if old:
            keep = set(finals)
            sink.delete(p for p in old if p not in keep)
            done.replaced = len([p for p in old if p not in keep])
        if sink.scheme != "file":
            listing = {
                "query_id": query_id,
                "rows": rows,
                "files": [f[len(target.rstrip("/")) + 1 :] for f in finals],
            }
            sink.put_bytes(f"{target.rstrip('/')}/{LISTING}{query_id}", json.dumps(listing).encode())
    cleanup(spec, sink, query_id)
    return done


def _rename_tree(paths: list[str], finals: list[str], target: str, spec: WriteSpec, query_id: str) -> None:
    """A new local folder: lay the parts out in a tree inside the staging folder, then rename it into place."""
    tree = query_folder(spec, query_id).removeprefix("file://") + "commit"
    root = target.rstrip("/")
    for src, dest in zip(paths, finals):
        inside = os.path.join(tree, dest[len(root) + 1 :])
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        os.replace(src.removeprefix("file://"), inside)
    os.makedirs(os.path.dirname(root) or ".", exist_ok=True)
    if not paths:
        os.makedirs(tree, exist_ok=True)
    os.rename(tree, root)


def cleanup(spec: WriteSpec, sink: Sink, query_id: str) -> int:
    """Delete the query's staging folder (every attempt's parts); returns how many files it held."""
    folder = query_folder(spec, query_id)
    n = sink.delete_under(folder)
    if sink.scheme == "file":
        try:
            os.rmdir(
                spec.staging.removeprefix("file://").rstrip("/")
            )  # the root's staging folder, when empty
        except OSError:
            pass
    return n
