"""TPC-H support: data generation (``tpchgen-cli``), the 22 query texts and their substitution parameters.

Query templates live in ``queries/qNN.sql``; placeholders are written ``{{NAME}}`` (a syntax that cannot occur
in SQL text). The texts are the TPC-H 3.0.1 queries adapted to DuckDB the way DuckDB's own tpch extension adapts
them: ``date '…' - interval '90' day`` instead of ``interval '90' day (3)``, and Q15's view as a CTE
(``with revenue0 as (…)``). ORDER BY and LIMIT are exactly the spec's.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path

from squall.errors import DataError, OptionError

__all__ = [
    "NAMES",
    "QUERY_NUMBERS",
    "TABLES",
    "dataset_files",
    "generate",
    "parameters",
    "query",
    "random_params",
    "validation_params",
]

TABLES: tuple[str, ...] = (
    "region",
    "nation",
    "supplier",
    "customer",
    "part",
    "partsupp",
    "orders",
    "lineitem",
)
"""The eight TPC-H tables, small to large (lineitem last: it is installed last by :func:`generate`)."""

QUERY_NUMBERS: tuple[int, ...] = tuple(range(1, 23))

NAMES: dict[int, str] = {
    1: "Pricing Summary Report",
    2: "Minimum Cost Supplier",
    3: "Shipping Priority",
    4: "Order Priority Checking",
    5: "Local Supplier Volume",
    6: "Forecasting Revenue Change",
    7: "Volume Shipping",
    8: "National Market Share",
    9: "Product Type Profit Measure",
    10: "Returned Item Reporting",
    11: "Important Stock Identification",
    12: "Shipping Modes and Order Priority",
    13: "Customer Distribution",
    14: "Promotion Effect",
    15: "Top Supplier",
    16: "Parts/Supplier Relationship",
    17: "Small-Quantity-Order Revenue",
    18: "Large Volume Customer",
    19: "Discounted Revenue",
    20: "Potential Part Promotion",
    21: "Suppliers Who Kept Orders Waiting",
    22: "Global Sales Opportunity",
}
"""The spec's name of each query."""

# --- value domains of the spec (clause 4.2.2.13 and 4.2.3) -------------------------------------------------

REGIONS: tuple[str, ...] = ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")
# (name, regionkey) in nationkey order.
NATIONS: tuple[tuple[str, int], ...] = (
    ("ALGERIA", 0),
    ("ARGENTINA", 1),
    ("BRAZIL", 1),
    ("CANADA", 1),
    ("EGYPT", 4),
    ("ETHIOPIA", 0),
    ("FRANCE", 3),
    ("GERMANY", 3),
    ("INDIA", 2),
    ("INDONESIA", 2),
    ("IRAN", 4),
    ("IRAQ", 4),
    ("JAPAN", 2),
    ("JORDAN", 4),
    ("KENYA", 0),
    ("MOROCCO", 0),
    ("MOZAMBIQUE", 0),
    ("PERU", 1),
    ("CHINA", 2),
    ("ROMANIA", 3),
    ("SAUDI ARABIA", 4),
    ("VIETNAM", 2),
    ("RUSSIA", 3),
    ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
)
SEGMENTS: tuple[str, ...] = ("AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD")
TYPE_SYLLABLE1: tuple[str, ...] = ("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO")
TYPE_SYLLABLE2: tuple[str, ...] = ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED")
TYPE_SYLLABLE3: tuple[str, ...] = ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER")
CONTAINER_SYLLABLE1: tuple[str, ...] = ("SM", "LG", "MED", "JUMBO", "WRAP")
CONTAINER_SYLLABLE2: tuple[str, ...] = ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM")
SHIP_MODES: tuple[str, ...] = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
# The 92 words P_NAME is made of.
COLORS: tuple[str, ...] = (
    "almond",
    "antique",
    "aquamarine",
    "azure",
    "beige",
    "bisque",
    "black",
    "blanched",
    "blue",
    "blush",
    "brown",
    "burlywood",
    "burnished",
    "chartreuse",
    "chiffon",
    "chocolate",
    "coral",
    "cornflower",
    "cornsilk",
    "cream",
    "cyan",
    "dark",
    "deep",
    "dim",
    "dodger",
    "drab",
    "firebrick",
    "floral",
    "forest",
    "frosted",
    "gainsboro",
    "ghost",
    "goldenrod",
    "green",
    "grey",
    "honeydew",
    "hot",
    "indian",
    "ivory",
    "khaki",
    "lace",
    "lavender",
    "lawn",
    "lemon",
    "light",
    "lime",
    "linen",
    "magenta",
    "maroon",
    "medium",
    "metallic",
    "midnight",
    "mint",
    "misty",
    "moccasin",
    "navajo",
    "navy",
    "olive",
    "orange",
    "orchid",
    "pale",
    "papaya",
    "peach",
    "peru",
    "pink",
    "plum",
    "powder",
    "puff",
    "purple",
    "red",
    "rose",
    "rosy",
    "royal",
    "saddle",
    "salmon",
    "sandy",
    "seashell",
    "sienna",
    "sky",
    "slate",
    "smoke",
    "snow",
    "spring",
    "steel",
    "tan",
    "thistle",
    "tomato",
    "turquoise",
    "violet",
    "wheat",
    "white",
    "yellow",
)
Q13_WORD1: tuple[str, ...] = ("special", "pending", "unusual", "express")
Q13_WORD2: tuple[str, ...] = ("packages", "requests", "accounts", "deposits")

_PLACEHOLDER = re.compile(r"\{\{([A-Z][A-Z0-9_]*)\}\}")
# Values are pasted into SQL text (mostly inside quotes): allow only what the spec's domains use.
_SAFE_VALUE = re.compile(r"[A-Za-z0-9 #.\-]*")


def _fraction(sf: float) -> str:
    """Q11's FRACTION, 0.0001 / SF, as a plain decimal literal."""
    text = f"{0.0001 / sf:.15f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _check_number(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 22:
        raise OptionError(f"TPC-H query number must be an integer from 1 to 22, got {n!r}")
    return n


def _check_sf(sf: float) -> float:
    if isinstance(sf, bool) or not isinstance(sf, int | float) or not math.isfinite(sf) or sf <= 0:
        raise OptionError(f"TPC-H scale factor must be a positive number, got {sf!r}")
    return float(sf)


@cache
def _template(n: int) -> str:
    return (resources.files(__name__) / "queries" / f"q{n:02d}.sql").read_text(encoding="utf-8")


def parameters(n: int) -> tuple[str, ...]:
    """Names of query ``n``'s substitution parameters, in order of first use in its text."""
    return tuple(dict.fromkeys(_PLACEHOLDER.findall(_template(_check_number(n)))))


def query(n: int, params: Mapping[str, str] | None = None, *, sf: float = 1.0) -> str:
    """Return the DuckDB SQL text of TPC-H query ``n`` (1..22) with its parameters substituted.

    ``params`` maps parameter names (see :func:`parameters`) to values as strings; names left out take the
    spec's validation values (:func:`validation_params` at scale factor ``sf``, which only matters for Q11's
    FRACTION). Unknown names and values with characters outside the spec's domains raise ``OptionError``.
    The text has no trailing semicolon.
    """
    values = validation_params(n, sf=sf)
    if params is not None:
        unknown = sorted(set(params) - set(values))
        if unknown:
            raise OptionError(
                f"TPC-H Q{n} has no parameter {', '.join(unknown)} (it takes {', '.join(values)})"
            )
        for name, value in params.items():
            if not isinstance(value, str) or not _SAFE_VALUE.fullmatch(value):
                raise OptionError(f"TPC-H Q{n} parameter {name}: bad value {value!r}")
        values.update(params)
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], _template(n)).strip().rstrip(";")


def validation_params(n: int, *, sf: float = 1.0) -> dict[str, str]:
    """The spec's validation (qualification) parameters of query ``n`` (TPC-H clause 2.4.x.3).

    They are the spec's values for every scale factor, except Q11's FRACTION, which is 0.0001 / ``sf``
    as qgen computes it (0.0001 at SF 1, the qualification database).
    """
    _check_number(n)
    sf = _check_sf(sf)
    table: dict[int, dict[str, str]] = {
        1: {"DELTA": "90"},
        2: {"SIZE": "15", "TYPE": "BRASS", "REGION": "EUROPE"},
        3: {"SEGMENT": "BUILDING", "DATE": "1995-03-15"},
        4: {"DATE": "1993-07-01"},
        5: {"REGION": "ASIA", "DATE": "1994-01-01"},
        6: {"DATE": "1994-01-01", "DISCOUNT": "0.06", "QUANTITY": "24"},
        7: {"NATION1": "FRANCE", "NATION2": "GERMANY"},
        8: {"NATION": "BRAZIL", "REGION": "AMERICA", "TYPE": "ECONOMY ANODIZED STEEL"},
        9: {"COLOR": "green"},
        10: {"DATE": "1993-10-01"},
        11: {"NATION": "GERMANY", "FRACTION": _fraction(sf)},
        12: {"SHIPMODE1": "MAIL", "SHIPMODE2": "SHIP", "DATE": "1994-01-01"},
        13: {"WORD1": "special", "WORD2": "requests"},
        14: {"DATE": "1995-09-01"},
        15: {"DATE": "1996-01-01"},
        16: {
            "BRAND": "Brand#45",
            "TYPE": "MEDIUM POLISHED",
            **{f"SIZE{i}": str(s) for i, s in enumerate((49, 14, 23, 45, 19, 3, 36, 9), start=1)},
        },
        17: {"BRAND": "Brand#23", "CONTAINER": "MED BOX"},
        18: {"QUANTITY": "300"},
        19: {
            "QUANTITY1": "1",
            "QUANTITY2": "10",
            "QUANTITY3": "20",
            "BRAND1": "Brand#12",
            "BRAND2": "Brand#23",
            "BRAND3": "Brand#34",
        },
        20: {"COLOR": "forest", "DATE": "1994-01-01", "NATION": "CANADA"},
        21: {"NATION": "SAUDI ARABIA"},
        22: {f"I{i}": str(c) for i, c in enumerate((13, 31, 23, 29, 30, 18, 17), start=1)},
    }
    return table[n]


def _month(rng: random.Random, first: tuple[int, int], last: tuple[int, int]) -> str:
    """First day of a month drawn uniformly from ``first`` to ``last`` (inclusive, (year, month))."""
    lo = first[0] * 12 + first[1] - 1
    hi = last[0] * 12 + last[1] - 1
    k = rng.randint(lo, hi)
    return _dt.date(k // 12, k % 12 + 1, 1).isoformat()


def _year(rng: random.Random) -> str:
    """January 1st of a year in 1993..1997."""
    return f"{rng.randint(1993, 1997)}-01-01"


def _brand(rng: random.Random) -> str:
    return f"Brand#{rng.randint(1, 5)}{rng.randint(1, 5)}"


def random_params(n: int, seed: int, *, sf: float = 1.0) -> dict[str, str]:
    """A random substitution set for query ``n`` following the spec's rules (qgen semantics, clause 2.4.x.3).

    Deterministic for ``(n, seed)`` across processes and platforms; ``sf`` only sets Q11's FRACTION
    (0.0001 / SF). The values are drawn from the same domains as qgen's, not with qgen's generator.
    """
    _check_number(n)
    sf = _check_sf(sf)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise OptionError(f"seed must be an integer, got {seed!r}")
    rng = random.Random(f"squall-tpch-q{n}-seed{seed}")
    if n == 1:
        return {"DELTA": str(rng.randint(60, 120))}
    if n == 2:
        return {
            "SIZE": str(rng.randint(1, 50)),
            "TYPE": rng.choice(TYPE_SYLLABLE3),
            "REGION": rng.choice(REGIONS),
        }
    if n == 3:
        return {"SEGMENT": rng.choice(SEGMENTS), "DATE": f"1995-03-{rng.randint(1, 31):02d}"}
    if n == 4:
        return {"DATE": _month(rng, (1993, 1), (1997, 10))}
    if n == 5:
        return {"REGION": rng.choice(REGIONS), "DATE": _year(rng)}
    if n == 6:
        return {
            "DATE": _year(rng),
            "DISCOUNT": f"0.0{rng.randint(2, 9)}",
            "QUANTITY": str(rng.randint(24, 25)),
        }
    if n == 7:
        first, second = rng.sample(NATIONS, 2)
        return {"NATION1": first[0], "NATION2": second[0]}
    if n == 8:
        name, regionkey = rng.choice(NATIONS)
        kind = " ".join(rng.choice(s) for s in (TYPE_SYLLABLE1, TYPE_SYLLABLE2, TYPE_SYLLABLE3))
        return {"NATION": name, "REGION": REGIONS[regionkey], "TYPE": kind}
    if n == 9:
        return {"COLOR": rng.choice(COLORS)}
    if n == 10:
        return {"DATE": _month(rng, (1993, 2), (1995, 1))}
    if n == 11:
        return {"NATION": rng.choice(NATIONS)[0], "FRACTION": _fraction(sf)}
    if n == 12:
        mode1, mode2 = rng.sample(SHIP_MODES, 2)
        return {"SHIPMODE1": mode1, "SHIPMODE2": mode2, "DATE": _year(rng)}
    if n == 13:
        return {"WORD1": rng.choice(Q13_WORD1), "WORD2": rng.choice(Q13_WORD2)}
    if n == 14:
        return {"DATE": _month(rng, (1993, 1), (1997, 12))}
    if n == 15:
        return {"DATE": _month(rng, (1993, 1), (1997, 10))}
    if n == 16:
        sizes = rng.sample(range(1, 51), 8)
        return {
            "BRAND": _brand(rng),
            "TYPE": f"{rng.choice(TYPE_SYLLABLE1)} {rng.choice(TYPE_SYLLABLE2)}",
            **{f"SIZE{i}": str(s) for i, s in enumerate(sizes, start=1)},
        }
    if n == 17:
        return {
            "BRAND": _brand(rng),
            "CONTAINER": f"{rng.choice(CONTAINER_SYLLABLE1)} {rng.choice(CONTAINER_SYLLABLE2)}",
        }
    if n == 18:
        return {"QUANTITY": str(rng.randint(312, 315))}
    if n == 19:
        return {
            "QUANTITY1": str(rng.randint(1, 10)),
            "QUANTITY2": str(rng.randint(10, 20)),
            "QUANTITY3": str(rng.randint(20, 30)),
            "BRAND1": _brand(rng),
            "BRAND2": _brand(rng),
            "BRAND3": _brand(rng),
        }
    if n == 20:
        return {"COLOR": rng.choice(COLORS), "DATE": _year(rng), "NATION": rng.choice(NATIONS)[0]}
    if n == 21:
        return {"NATION": rng.choice(NATIONS)[0]}
    codes = rng.sample(range(10, 35), 7)
    return {f"I{i}": str(c) for i, c in enumerate(codes, start=1)}


# --- data generation -----------------------------------------------------------------------------------


def _tpchgen_executable() -> str:
    """``tpchgen-cli`` next to the running interpreter (the venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("tpchgen-cli")
    if found is None:
        raise DataError(
            "tpchgen-cli not found next to the Python interpreter or on PATH (pip install tpchgen-cli)"
        )
    return found


def _part_number(path: Path) -> int:
    """Part number of ``<table>.<part>.parquet``."""
    try:
        return int(path.name.split(".")[-2])
    except (IndexError, ValueError):
        return 0


def dataset_files(data: str | Path) -> dict[str, list[Path]]:
    """The Parquet files of each TPC-H table under ``data``, in ``TABLES`` order.

    A table is either ``data/<table>.parquet`` or a folder ``data/<table>/`` of ``*.parquet`` files (listed in
    part order). Raises ``DataError`` naming the first table that is missing.
    """
    root = Path(data)
    result: dict[str, list[Path]] = {}
    for table in TABLES:
        single = root / f"{table}.parquet"
        folder = root / table
        if single.is_file():
            result[table] = [single]
        elif folder.is_dir() and (
            files := sorted(folder.glob("*.parquet"), key=lambda p: (_part_number(p), p.name))
        ):
            result[table] = files
        else:
            raise DataError(
                f"TPC-H table {table} not found in {root} (no {single.name} nor {folder.name}/*.parquet)"
            )
    return result


def existing_sf(out: str | Path) -> float | None:
    """The scale factor of the TPC-H ``supplier`` table already in ``out`` (10,000 rows per unit of
    scale), None when there is none."""
    root = Path(out)
    files = [root / "supplier.parquet"] if (root / "supplier.parquet").is_file() else []
    if not files and (root / "supplier").is_dir():
        files = sorted((root / "supplier").glob("*.parquet"))
    if not files:
        return None
    import pyarrow.parquet as pq

    try:
        rows = sum(pq.read_metadata(f).num_rows for f in files)
    except (OSError, ValueError):
        return None
    return rows / 10_000


def _check_parts(parts: int | None) -> None:
    if parts is not None and (isinstance(parts, bool) or not isinstance(parts, int) or parts < 1):
        raise OptionError(f"TPC-H parts must be a positive integer, got {parts!r}")


def _check_output(out: str | Path, sf: float, force: bool) -> Path:
    """``out`` made absolute; refused (``OptionError``) if it is a file or, unless ``force``, holds another SF."""
    out = Path(out).absolute()
    if out.exists() and not out.is_dir():
        raise OptionError(f"TPC-H output {out} exists and is not a folder")
    other = existing_sf(out) if out.is_dir() and not force else None
    if other is not None and round(other * 10_000) != max(1, int(sf * 10_000)):
        raise OptionError(
            f"{out} holds TPC-H SF {other:g}, not SF {sf:g}: remove it, choose another --out or pass --force"
        )
    return out


def replace_tables(staged: Path, out: Path, parted: bool, trash: Path) -> None:
    """Move every table from ``staged`` into ``out`` (lineitem last), any earlier version of a table in
    either layout (file or folder of parts) moved to ``trash`` first."""
    trash.mkdir()
    for table in TABLES:
        new_name = table if parted else f"{table}.parquet"
        for stale in (table, f"{table}.parquet"):
            if os.path.lexists(out / stale):
                os.replace(out / stale, trash / stale)
        os.replace(staged / new_name, out / new_name)


def generate(sf: float, out: str | Path, parts: int | None = None, *, force: bool = False) -> list[Path]:
    """Write TPC-H at scale factor ``sf`` as Parquet into ``out`` with ``tpchgen-cli``; return the files.

    Without ``parts`` each table is ``out/<table>.parquet``; with ``parts`` each table is a folder
    ``out/<table>/<table>.<part>.parquet``. tpchgen-cli always writes region and nation as one part, and at
    small scale factors some parts of the other tables can be empty (0 rows) files. The tool writes into a
    temporary folder beside ``out``; the tables are then moved into place (lineitem last, replacing any
    earlier version of the same table in either layout), so a half-written dataset never looks complete.

    A folder holding TPC-H of another scale factor is refused (``OptionError``) unless ``force``.

    Raises ``OptionError`` for a bad ``sf`` or ``parts`` and ``DataError`` when the tool is missing or fails.
    """
    sf = _check_sf(sf)
    _check_parts(parts)
    exe = _tpchgen_executable()
    out = _check_output(out, sf, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        staged = tmp / "data"
        cmd = [exe, "parquet", "--scale-factor", repr(sf), "--output-dir", str(staged), "--quiet"]
        if parts is not None:
            cmd += ["--parts", str(parts)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout or "").strip().splitlines()
            last = lines[-1].strip() if lines else f"exit code {proc.returncode}"
            raise DataError(f"tpchgen-cli failed for SF {sf:g}: {last}")
        try:
            dataset_files(staged)
        except DataError as exc:
            raise DataError(f"tpchgen-cli wrote an incomplete dataset: {exc}") from None
        os.chmod(staged, 0o755)
        if not out.exists():
            os.replace(staged, out)
        else:
            replace_tables(staged, out, parts is not None, tmp / "old")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [path for files in dataset_files(out).values() for path in files]
