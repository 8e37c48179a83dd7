"""Where writes may go: the locations a connection declares writable.

``Writable(["out/", "s3://bucket/prefix/"])``: a target must lie inside one of them. A relative target
resolves inside the first; an absolute path or URL must be under one of them; ``..`` components are
refused, and so is a local target whose existing part leads outside its root through a symlink. With
nothing writable every write is refused. Each root keeps its staging folder (``.squall-staging/``, hidden
from table listings) so a commit moves files within one file system or bucket.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from squall import aws
from squall.errors import OptionError, UnsafeQueryError

STAGING = ".squall-staging"

_NOTHING = (
    "writing is not enabled on this connection: declare where writes may go with "
    "connect(..., writable=['out/']), the CLI's --writable DIR, or writable = [...] in squall.toml"
)


class Writable:
    """The writable roots of a connection (see module doc)."""

    def __init__(self, locations: Iterable[str] | None = None, *, base: str | None = None) -> None:
        self.roots: tuple[str, ...] = tuple(
            _root(str(loc), base) for loc in (locations or ()) if str(loc).strip()
        )

    def __bool__(self) -> bool:
        return bool(self.roots)

    def __repr__(self) -> str:
        return f"Writable({list(self.roots)!r})"

    def resolve(self, target: str, what: str = "target") -> str:
        """The absolute path or URL of ``target``; UnsafeQueryError when it may not be written."""
        if not self.roots:
            raise UnsafeQueryError(_NOTHING)
        text = target.strip()
        if not text:
            raise OptionError(f"empty {what}")
        folder = text.endswith("/")
        if ".." in text.replace("\\", "/").split("/"):
            raise UnsafeQueryError(f"{what} {target!r} may not contain '..'")
        if aws.is_s3_url(text):
            path = text
        elif "://" in text and not text.startswith("file://"):
            raise UnsafeQueryError(
                f"{what} {target!r}: only local folders and s3:// locations can be written"
            )
        elif os.path.isabs(text.removeprefix("file://")):
            path = os.path.normpath(text.removeprefix("file://"))
            if self.root_of(path) is None:
                path = _real(path)  # a root reached through a symlinked folder (/tmp on macOS)
        else:
            first = self.roots[0]
            path = f"{first}{text}" if aws.is_s3_url(first) else os.path.normpath(os.path.join(first, text))
        root = self.root_of(path)
        if root is None:
            raise UnsafeQueryError(
                f"{what} {target!r} is outside the writable locations ({', '.join(self.roots)})"
            )
        if path[len(root) :].split("/")[0] == STAGING:
            raise UnsafeQueryError(f"{what} {target!r} is inside the staging folder {root}{STAGING}/")
        if not aws.is_s3_url(path):
            _no_escape(path, root, target, what)
        if folder and not path.endswith("/"):
            path += "/"
        return path

    def check_platform(self, platform: Any) -> None:
        """OptionError when the workers of ``platform`` (a Platform or its class: ``name``, ``storages``)
        cannot write under a root: Lambda functions see no folder of this machine."""
        for root in self.roots:
            scheme = "s3" if aws.is_s3_url(root) else "file"
            if scheme not in platform.storages:
                kinds = " or ".join(
                    "local folders" if s == "file" else f"{s}:// locations" for s in platform.storages
                )
                raise OptionError(f"writable location {root!r}: the {platform.name} platform's workers write "
                                  f"to {kinds} only")  # fmt: skip

    def root_of(self, path: str) -> str | None:
        """The writable root holding ``path`` (None when none does)."""
        for root in self.roots:
            if aws.is_s3_url(root):
                if path.startswith(root) or path.rstrip("/") + "/" == root:
                    return root
            elif not aws.is_s3_url(path) and (path == root.rstrip("/") or path.startswith(root)):
                return root
        return None

    def staging(self, path: str) -> str:
        """The staging folder for writes to ``path`` (in the root that holds it)."""
        root = self.root_of(path)
        assert root is not None
        return f"{root}{STAGING}/"


def _root(location: str, base: str | None) -> str:
    """A writable location as a root: an S3 prefix, or a local folder's real path; both end with ``/``."""
    text = location.strip()
    if aws.is_s3_url(text):
        bucket, key = aws.parse_s3_url(text, OptionError, "writable location")
        if ".." in key.split("/"):
            raise OptionError(f"writable location {location!r} may not contain '..'")
        return f"s3://{bucket}/{key.strip('/') + '/' if key.strip('/') else ''}"
    if "://" in text and not text.startswith("file://"):
        raise OptionError(f"writable location {location!r}: give a local folder or s3://bucket/prefix/")
    path = text.removeprefix("file://")
    path = os.path.realpath(os.path.join(base or os.getcwd(), path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise OptionError(f"writable location {location!r} is a file, not a folder")
    return path.rstrip("/") + "/"


def _real(path: str) -> str:
    """``path`` with the symlinks of its deepest existing part resolved (the rest does not exist yet)."""
    head = path
    rest: list[str] = []  # the names below the deepest existing part, outermost first
    while os.path.dirname(head) != head and not os.path.lexists(head):
        head, name = os.path.split(head)
        rest.insert(0, name)
    return os.path.join(os.path.realpath(head), *rest)


def _no_escape(path: str, root: str, target: str, what: str) -> None:
    """UnsafeQueryError when the deepest existing part of ``path`` below ``root`` resolves outside it (a
    symlink)."""
    probe = path.rstrip("/")
    while len(probe) >= len(root) and not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if len(probe) < len(root):  # nothing below the root exists yet (nor the root)
        return
    if os.path.islink(path.rstrip("/")) or not (os.path.realpath(probe) + "/").startswith(root):
        raise UnsafeQueryError(f"{what} {target!r} leads outside the writable locations through a symlink")


def writable_list(value: str | Sequence[str] | None) -> list[str]:
    """``writable`` as given by a caller: one location, a comma-separated text, or a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]
