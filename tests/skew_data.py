"""A small skewed dataset for the skew tests: 30 % of ``fact`` rows carry one hot key.

``fact(k, v, pad)``: 60,000 rows in 16 row groups, k = 7 on every third-and-a-bit row (30 %), the rest
spread over 1..20,000; ``dim(k, name, grp)``: one row per key 1..20,000. Deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HOT_KEY = 7
HOT_SHARE = 0.3
FACT_ROWS = 60_000
DIM_ROWS = 20_000

#: the skewed join and aggregations the tests check against DuckDB
JOIN = (
    "SELECT d.grp, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON f.k = d.k GROUP BY d.grp ORDER BY 1"
)
JOIN_ROWS = "SELECT f.k, f.v, d.name FROM fact f JOIN dim d ON f.k = d.k WHERE f.v % 97 = 0"
LEFT_JOIN = "SELECT d.grp, count(*) AS n, count(d.name) AS m FROM fact f LEFT JOIN dim d ON f.k = d.k GROUP BY 1 ORDER BY 1"
#: the hot key on the null-supplied side of outer joins (Q13's shape), and NULL keys on both sides
OUTER_HOT = (
    "SELECT d.grp, count(*) AS n, count(f.v) AS m, sum(f.v) AS s FROM dim d LEFT JOIN fact f ON d.k = f.k "
    "GROUP BY 1 ORDER BY 1"
)
OUTER_ROWS = "SELECT d.k, d.name, f.v FROM fact f RIGHT JOIN dim d ON f.k = d.k WHERE d.k < 100"
OUTER_NULLS = (
    "SELECT d.grp, count(*) AS n, count(f.v) AS m FROM "
    "(SELECT CASE WHEN k % 3 = 0 THEN NULL ELSE k END AS k, grp FROM dim) d LEFT JOIN "
    "(SELECT CASE WHEN v % 4 = 0 THEN NULL ELSE k END AS k, v FROM fact) f ON d.k = f.k GROUP BY 1 ORDER BY 1"
)
AGG = "SELECT k, count(DISTINCT v) AS n FROM fact GROUP BY k ORDER BY n DESC, k LIMIT 20"
AGG_SUM = "SELECT k, sum(v) AS s, count(*) AS n FROM fact GROUP BY k ORDER BY k"
#: a window on the join key runs where the join put the rows (the join then spreads no hot key)
WINDOW = (
    "SELECT f.k, f.v, d.grp, rank() OVER (PARTITION BY f.k ORDER BY f.v) AS r "
    "FROM fact f JOIN dim d ON f.k = d.k WHERE f.v % 97 = 0"
)


def write_skewed(
    folder: Path,
    hot_share: float = HOT_SHARE,
    seed: int = 13,
    fact_rows: int = FACT_ROWS,
    dim_rows: int = DIM_ROWS,
) -> Path:
    """Write ``fact`` and ``dim`` under ``folder`` (created); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    keys = rng.integers(1, dim_rows + 1, fact_rows)
    keys[rng.random(fact_rows) < hot_share] = HOT_KEY
    fact = pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "v": pa.array(rng.integers(0, 1_000_000, fact_rows), pa.int64()),
            "pad": pa.array([f"p{i % 1000:04d}" for i in range(fact_rows)]),
        }
    )
    pq.write_table(fact, folder / "fact.parquet", row_group_size=fact_rows // 16)
    dk = np.arange(1, dim_rows + 1)
    dim = pa.table(
        {
            "k": pa.array(dk, pa.int64()),
            "name": pa.array([f"name{i}" for i in dk]),
            "grp": pa.array(dk % 13, pa.int64()),
        }
    )
    pq.write_table(dim, folder / "dim.parquet", row_group_size=dim_rows // 8)
    return folder
