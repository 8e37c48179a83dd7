"""Users of the service: who may call it, what they may see and read, and their own limits.

A users file (``squall serve --users FILE``, ``[users.NAME]`` tables in ``squall.toml``, or on the deployed
API ``SQUALL_USERS``: the path of a TOML file or the same tables as inline JSON) names each user::

    [users.alice]
    token_sha256 = "…"              # hex SHA-256 of alice's bearer token (the token itself is never stored)
    role = "user"                   # "user": only their own queries; "admin": every query
    max_running = 2                 # alice's queries running at once (the scheduler's per-user limit)
    max_queued = 10                 # alice's queries waiting (more: 429)
    max_bytes_scanned = "10GB"      # per query, refused before it runs from the plan
    max_result_rows = 1000000       # per query, like the server's limits
    max_result_bytes = "64MiB"
    max_run_time = "10m"
    catalogs = ["data", "lake"]     # what alice may read (default: everything)
    iam_principal = "arn:aws:iam::123456789012:user/alice"   # the deployed API: this IAM caller is alice

``catalogs`` lists catalog names (``data``: the tables of ``--data``; a named catalog such as ``lake``: all its
tables) and table names (``nation``, ``lake.sales.orders``). ``iam_principal`` is one ARN or a list; a role's
ARN (``arn:aws:iam::123:role/analyst``) also matches its sessions (``arn:aws:sts::123:assumed-role/analyst/…``).

Authentication (:meth:`Users.authenticate`): a bearer token is hashed and compared with every user's hash
(:func:`hmac.compare_digest`); on the deployed API the IAM principal that API Gateway verified (the request
context) is looked up by ARN. An unknown token is 401; an IAM principal that is in no users file entry is 403
(the file is an allow-list; without a users file every principal is a user of its own, as an admin).
``--token T`` is the single-user shorthand: one admin user called ``admin``; no token and no users: everyone is
``anonymous``, an admin (the server trusts whoever can reach it, as before users existed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from squall.errors import OptionError, PermissionDenied
from squall.sizes import parse_duration, parse_size

ANONYMOUS = "anonymous"
#: the user of ``--token T``
TOKEN_USER = "admin"
ROLES = ("user", "admin")
#: the catalog name of the tables of ``--data`` (named catalogs have their own names)
DATA_CATALOG = "data"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_KEYS = ("token_sha256", "role", "max_running", "max_queued", "max_bytes_scanned", "max_result_rows",
         "max_result_bytes", "max_run_time", "catalogs", "iam_principal")  # fmt: skip
#: users-file key → the runner's per-query limit (:class:`~squall.service.runner.Limits` field)
LIMIT_KEYS = {"max_bytes_scanned": "max_scan_bytes", "max_result_rows": "max_result_rows",
              "max_result_bytes": "max_result_bytes", "max_run_time": "max_run_s"}  # fmt: skip


@dataclass(frozen=True)
class User:
    """One user of the service (see the module doc). None for a limit: the server's limits only."""

    name: str
    role: str = "user"
    token_sha256: str | None = field(default=None, repr=False)
    max_running: int | None = None
    max_queued: int | None = None
    max_bytes_scanned: int | None = None
    max_result_rows: int | None = None
    max_result_bytes: int | None = None
    max_run_time: float | None = None
    #: catalogs and tables the user may read (None: all)
    catalogs: tuple[str, ...] | None = None
    iam_principals: tuple[str, ...] = ()

    @property
    def admin(self) -> bool:
        """An admin sees, fetches and cancels every query."""
        return self.role == "admin"

    def limits_doc(self) -> dict[str, Any]:
        """The per-query limits as stored in a query's request (``{"max_bytes_scanned": n, …}``, set ones only)."""
        return {key: getattr(self, key) for key in LIMIT_KEYS if getattr(self, key) is not None}

    def public(self) -> dict[str, Any]:
        """What ``GET /v1/whoami`` shows: the name, role, limits and catalogs (never the token's hash)."""
        limits = {"max_running": self.max_running, "max_queued": self.max_queued, **self.limits_doc()}
        return {"user": self.name, "role": self.role,
                "limits": {k: v for k, v in limits.items() if v is not None},
                "catalogs": list(self.catalogs) if self.catalogs is not None else None}  # fmt: skip

    def may_see(self, owner: Any) -> bool:
        """Whether this user may see a query of ``owner`` (a query without an owner: admins only)."""
        return self.admin or (isinstance(owner, str) and owner == self.name)

    def may_read(self, table: str) -> bool:
        """Whether the user may read ``table`` (as written in SQL: ``nation``, ``lake.ns.t``)."""
        if self.catalogs is None:
            return True
        allowed = {c.lower() for c in self.catalogs}
        parts = table.lower().split(".")
        return table.lower() in allowed or (parts[0] if len(parts) == 3 else DATA_CATALOG) in allowed

    def check_tables(self, tables: Iterable[str]) -> None:
        """PermissionDenied naming the first table of ``tables`` (as written in SQL: ``nation``,
        ``lake.ns.t``) the user may not read."""
        for table in tables:
            if not self.may_read(table):
                allowed = ", ".join(self.catalogs or ()) or "none"
                raise PermissionDenied(f"user {self.name} may not read table {table} (catalogs: {allowed})")


ADMIN_ANONYMOUS = User(ANONYMOUS, role="admin")


def sha256_hex(token: str) -> str:
    """The hex SHA-256 of a token (what ``token_sha256`` holds)."""
    return hashlib.sha256(token.encode()).hexdigest()


def _role_arn(arn: str) -> str | None:
    """The role ARN of an assumed-role session ARN (``arn:aws:sts::123:assumed-role/R/session``), else None."""
    match = re.fullmatch(r"arn:(aws[a-z-]*):sts::(\d+):assumed-role/([^/]+)/.+", arn)
    return f"arn:{match.group(1)}:iam::{match.group(2)}:role/{match.group(3)}" if match else None


class Users:
    """The users of one service (see the module doc); empty: no authentication (everyone is an admin)."""

    def __init__(self, users: Iterable[User] = ()) -> None:
        self.users = {u.name: u for u in users}
        self._by_principal = {arn: u for u in self.users.values() for arn in u.iam_principals}

    def __bool__(self) -> bool:
        return bool(self.users)

    @property
    def need_token(self) -> bool:
        """Whether requests must carry a bearer token (some user has one)."""
        return any(u.token_sha256 for u in self.users.values())

    def by_token(self, token: str) -> User | None:
        """The user whose ``token_sha256`` is the hash of ``token`` (every hash is compared, in constant time)."""
        digest = sha256_hex(token).encode()
        found = None
        for user in self.users.values():
            if user.token_sha256 and hmac.compare_digest(digest, user.token_sha256.encode()):
                found = user
        return found

    def by_principal(self, arn: str) -> User | None:
        """The user of an IAM principal ARN (a role's sessions match the role)."""
        user = self._by_principal.get(arn)
        if user is None and (role := _role_arn(arn)) is not None:
            user = self._by_principal.get(role)
        return user

    def with_token(self, token: str | None) -> Users:
        """These users and, for ``--token T``, the admin user ``admin`` whose token is T."""
        if not token:
            return self
        if TOKEN_USER in self.users:
            raise OptionError(f"--token: the users file already has a user called {TOKEN_USER}; drop --token")
        return Users([*self.users.values(), User(TOKEN_USER, role="admin", token_sha256=sha256_hex(token))])

    @classmethod
    def load(cls, table: Any, source: str) -> Users:
        """Users from the ``users`` table of a TOML file or JSON document (``{name: {key: value}}``);
        OptionError naming ``source``, the user and the key on a bad value."""
        if table is None:
            return cls()
        if not isinstance(table, Mapping) or not all(isinstance(v, Mapping) for v in table.values()):
            raise OptionError(f"{source}: users must be tables [users.NAME]")
        users = [_user(str(name), props, source) for name, props in table.items()]
        seen: dict[str, str] = {}
        for user in users:
            if user.token_sha256 is not None:
                if user.token_sha256 in seen:
                    raise OptionError(
                        f"{source}: users {seen[user.token_sha256]} and {user.name} have the same token_sha256"
                    )
                seen[user.token_sha256] = user.name
        return cls(users)

    @classmethod
    def from_file(cls, path: str) -> Users:
        """The ``[users.NAME]`` tables of a TOML file (a file with only them, or a whole squall.toml)."""
        try:
            with open(path, "rb") as fh:
                doc = tomllib.load(fh)
        except OSError as err:
            raise OptionError(f"cannot read users file {path}: {err.strerror}") from None
        except tomllib.TOMLDecodeError as err:
            raise OptionError(f"users file {path}: not TOML: {err}") from None
        if "users" not in doc:
            raise OptionError(f"users file {path}: no [users.NAME] tables")
        return cls.load(doc["users"], f"users file {path}")

    @classmethod
    def from_env(cls) -> Users:
        """The deployed API's users: ``SQUALL_USERS`` is inline JSON (``{"users": {…}}`` or ``{name: {…}}``) or
        the path of a TOML users file; unset: none."""
        value = (os.environ.get("SQUALL_USERS") or "").strip()
        if not value:
            return cls()
        if value.startswith("{"):
            try:
                doc = json.loads(value)
            except json.JSONDecodeError as err:
                raise OptionError(f"SQUALL_USERS: not JSON: {err}") from None
            return cls.load(doc.get("users", doc) if isinstance(doc, dict) else doc, "SQUALL_USERS")
        return cls.from_file(value)


def _user(name: str, props: Mapping[str, Any], source: str) -> User:
    where = f"{source}: user {name}"
    if not _NAME.match(name):
        raise OptionError(f"{where}: a user name is 1 to 64 letters, digits, '_', '.', '@' or '-'")
    unknown = sorted(set(props) - set(_KEYS))
    if unknown:
        raise OptionError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(_KEYS)})")
    values: dict[str, Any] = {}
    digest = props.get("token_sha256")
    if digest is not None:
        if not isinstance(digest, str) or not _HEX64.match(digest.strip().lower()):
            raise OptionError(f"{where}: token_sha256 must be 64 hex digits (sha256sum of the token)")
        values["token_sha256"] = digest.strip().lower()
    role = props.get("role", "user")
    if role not in ROLES:
        raise OptionError(f"{where}: role must be user or admin, got {role!r}")
    for key in ("max_running", "max_queued", "max_result_rows"):
        if key in props:
            values[key] = _count(props[key], f"{where}: {key}", 0 if key == "max_queued" else 1)
    for key in ("max_bytes_scanned", "max_result_bytes"):
        if key in props and not _off(props[key]):
            values[key] = parse_size(props[key], f"{where}: {key}")
    if "max_run_time" in props and not _off(props["max_run_time"]):
        values["max_run_time"] = parse_duration(props["max_run_time"], f"{where}: max_run_time")
    if "catalogs" in props:
        values["catalogs"] = _strings(props["catalogs"], f"{where}: catalogs", "catalog or table names")
    if "iam_principal" in props:
        arns = _strings(props["iam_principal"], f"{where}: iam_principal", "IAM ARNs")
        bad = [a for a in arns if not a.startswith("arn:")]
        if bad:
            raise OptionError(f"{where}: iam_principal must be IAM ARNs (arn:aws:iam::…), got {bad[0]!r}")
        values["iam_principals"] = arns
    if "token_sha256" not in values and "iam_principals" not in values:
        raise OptionError(f"{where}: needs token_sha256 (or iam_principal on the deployed API)")
    return User(name, role=role, **values)


def _off(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() in ("off", "none", "unlimited")


def _count(value: Any, label: str, smallest: int) -> int | None:
    if _off(value):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
        raise OptionError(f"{label} must be a whole number of at least {smallest}, got {value!r}")
    return value


def _strings(value: Any, label: str, what: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v.strip() for v in items):
        raise OptionError(f"{label} must be a list of {what}")
    return tuple(v.strip() for v in items)


def plan_tables(plan: Any, catalog_names: Iterable[str]) -> list[str]:
    """The tables a plan reads, as written in SQL (``nation``; a named catalog's ``lake.ns.t``; a metadata
    table as its table): from the plan's scan inputs."""
    names = {n.lower() for n in catalog_names}
    out: list[str] = []
    for stage in plan.stages:
        for scan in stage.inputs:
            table = getattr(scan, "table", None)
            if not table:
                continue
            base = str(table).split("$", 1)[0]
            parts = base.split("__")
            shown = ".".join(parts) if len(parts) == 3 and parts[0].lower() in names else base
            if shown not in out:
                out.append(shown)
    return out


def sql_tables(sql: str) -> list[str]:
    """The tables ``sql`` names in its FROM clauses (a write statement: its query's), as written (``nation``,
    ``lake.ns.t``), without the names of its CTEs; what the deployed API checks before the driver plans. It
    may miss a table a plan reads (a CTE named like a table), never names one it does not."""
    import sqlglot.expressions as exp

    from squall.driver.frontend.bind import parse
    from squall.driver.write.statements import parse_write

    statement = parse_write(sql)
    text = sql if statement is None else statement.query
    if not text:
        return []
    tree = parse(text)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out: list[str] = []
    for table in tree.find_all(exp.Table):
        if not table.name or (not table.db and table.name.lower() in ctes):
            continue
        name = ".".join(p for p in (table.catalog, table.db, table.name) if p).split("$", 1)[0]
        if name not in out:
            out.append(name)
    return out


def check_write_target(user: User, sql: str) -> None:
    """PermissionDenied when ``sql`` is a write statement whose target table (CREATE TABLE AS, INSERT INTO, DROP
    TABLE) is outside the tables ``user`` may read: nobody changes a table they may not read. A COPY's target is a
    path, held to the server's writable locations instead."""
    if user.catalogs is None:
        return
    from squall.driver.write.statements import parse_write

    statement = parse_write(sql)
    if statement is not None and statement.kind != "copy" and statement.target:
        user.check_tables([statement.target])


def check_plan(user: User, plan: Any, catalog_names: Iterable[str]) -> None:
    """PermissionDenied when ``plan`` reads a table ``user`` may not read (see :meth:`User.check_tables`)."""
    if user.catalogs is not None:
        user.check_tables(plan_tables(plan, catalog_names))


def anonymous(token: str | None) -> Users:
    """The users of a server without a users file: ``--token T`` (one admin) or nobody (no authentication)."""
    return Users().with_token(token)
