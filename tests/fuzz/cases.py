"""Saved fuzz cases: ``tests/fuzz/cases/NNN.sql``, a header of ``-- key: value`` lines, then the SQL.

Header keys: ``seed`` (and query index), ``schema`` (``tpch``, the default, or ``tpcds``: the data it runs
on), ``workers`` (where it was found), ``kind`` (wrong/error/internal),
``differs`` (what differed), ``fails-at`` (worker counts that failed when saved; the replay marks those
``xfail(strict=True)`` until the bug is fixed — then remove the line), ``original`` (the unminimised query).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CASES = Path(__file__).with_name("cases")


@dataclass
class Case:
    path: Path
    header: dict[str, str]
    sql: str

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def schema(self) -> str:
        """The schema (data) the case runs on: ``tpch`` (no header line: cases saved before TPC-DS) or ``tpcds``."""
        return self.header.get("schema", "tpch").strip() or "tpch"

    def fails_at(self) -> set[int]:
        text = self.header.get("fails-at", "").strip()
        return {int(x) for x in text.replace(",", " ").split() if x.isdigit()}


def load_cases(folder: Path = CASES) -> list[Case]:
    out = []
    for path in sorted(folder.glob("*.sql")):
        header: dict[str, str] = {}
        body = []
        for line in path.read_text().splitlines():
            if line.startswith("-- ") and ":" in line and not body:
                key, _, value = line[3:].partition(":")
                header[key.strip()] = value.strip()
            elif line.strip() or body:
                body.append(line)
        out.append(Case(path, header, "\n".join(body).strip()))
    return out


def _one_line(text: str, width: int = 600) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def save_case(sql: str, header: dict[str, str], folder: Path = CASES) -> Path:
    """Write the next ``NNN.sql`` (unless the same SQL is already saved); return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    for case in load_cases(folder):
        if case.sql.strip() == sql.strip():
            return case.path
    numbers = [int(p.stem) for p in folder.glob("*.sql") if p.stem.isdigit()]
    path = folder / f"{max(numbers, default=0) + 1:03d}.sql"
    lines = [f"-- {key}: {_one_line(value)}" for key, value in header.items()]
    path.write_text("\n".join(lines) + "\n" + sql.strip() + "\n")
    return path
