"""The case format of rule fixture files (``tests/fixtures/<stage>/<rule>.sql``; see
``tests/fixtures/planner/README.md``): a header, the SQL, and the expected text after ``-- expect:``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from squall.driver.options import PlannerOptions

_HEADER = re.compile(r"^-- (name|workers|options|note): ?(.*)$")


@dataclass
class Case:
    name: str
    workers: int
    options: PlannerOptions
    sql: str
    expect: str
    start: int  # line index of the case's "-- name:" header
    end: int  # line index after its last line


def parse_cases(text: str) -> list[Case]:
    """Cases of one fixture file (see tests/fixtures/planner/README.md)."""
    lines = text.splitlines()
    cases: list[Case] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("-- name:"):
            assert not lines[i].strip(), f"line {i + 1}: expected '-- name:', got {lines[i]!r}"
            i += 1
            continue
        start, header = i, {"workers": "4", "options": ""}
        while i < len(lines) and (m := _HEADER.match(lines[i])):
            header[m.group(1)] = m.group(2).strip()
            i += 1
        sql = []
        while i < len(lines) and lines[i] != "-- expect:":
            sql.append(lines[i])
            i += 1
        assert i < len(lines), f"case {header['name']}: no '-- expect:' line"
        i += 1
        expect = []
        while i < len(lines) and lines[i].startswith("--") and not lines[i].startswith("-- name:"):
            expect.append(lines[i][3:] if lines[i].startswith("-- ") else lines[i][2:])
            i += 1
        knobs = (PlannerOptions.setting(kv.strip()) for kv in header["options"].split(",") if kv.strip())
        options = PlannerOptions(**dict(knobs))
        sql_text, expect_text = "\n".join(sql).strip(), "\n".join(expect)
        cases.append(Case(header["name"], int(header["workers"]), options, sql_text, expect_text, start, i))
    return cases


def expect_block(text: str) -> list[str]:
    return ["-- expect:"] + [f"-- {line}" if line else "--" for line in text.split("\n")]


def write_expect(path: Path, text: str, case: Case, got: str) -> None:
    """Rewrite ``case``'s expected text in its fixture file (``text``: the file as read) with ``got``."""
    lines = text.splitlines()
    body = lines[case.start : case.end]
    at = body.index("-- expect:")
    lines[case.start : case.end] = body[:at] + expect_block(got)
    path.write_text("\n".join(lines) + "\n")
