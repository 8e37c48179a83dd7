"""Tables whose join sides the planner misestimates both ways (``LIKE`` is a flat 10 % guess), for the
run-time join decision's tests (tests/test_runtime_join.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DIM_ROWS = 100_000
#: dim rows whose name matches '%zz%' (the others match '%a%')
RARE = 20
BIG_FACT_ROWS = 100_000
SMALL_FACT_ROWS = 16_000

#: dim side estimated at 10 % (small: broadcast) but all of it passes: it is big, so hash both
EST_SMALL_IS_BIG = (
    "SELECT d.tag, count(*) AS n, sum(f.v) AS s FROM big_fact f JOIN dim d ON f.d_id = d.id "
    "WHERE d.name LIKE '%a%' GROUP BY d.tag"
)
#: dim side estimated at 10 % (too big for the small fact: hash) but 20 rows pass: broadcast it
EST_BIG_IS_SMALL = (
    "SELECT d.tag, count(*) AS n, sum(f.v) AS s FROM small_fact f JOIN dim d ON f.d_id = d.id "
    "WHERE d.name LIKE '%zz%' GROUP BY d.tag"
)
#: the same as EXISTS (a semi join) and as a LEFT JOIN
SEMI_BIG_IS_SMALL = (
    "SELECT count(*) AS n, sum(v) AS s FROM small_fact f "
    "WHERE EXISTS (SELECT 1 FROM dim d WHERE d.id = f.d_id AND d.name LIKE '%zz%')"
)
LEFT_BIG_IS_SMALL = (
    "SELECT count(*) AS n, count(d.tag) AS matched, sum(f.v) AS s FROM small_fact f "
    "LEFT JOIN (SELECT id, tag FROM dim WHERE name LIKE '%zz%') d ON f.d_id = d.id"
)


def write_runtime_join_data(
    folder: Path, dim_rows: int = DIM_ROWS, big_rows: int = BIG_FACT_ROWS, small_rows: int = SMALL_FACT_ROWS
) -> Path:
    """dim(id, tag, name), big_fact(d_id, v), small_fact(d_id, v) as Parquet under ``folder`` (the row counts
    as given; the tests use the defaults)."""
    rng = np.random.default_rng(7)
    ids = np.arange(dim_rows, dtype=np.int64)
    rare = set(rng.choice(dim_rows, RARE, replace=False).tolist())
    names = [f"zz-{i}" if i in rare else f"a-{i}" for i in range(dim_rows)]
    dim = pa.table({"id": ids, "tag": ids % 7, "name": names})
    pq.write_table(dim, folder / "dim.parquet", row_group_size=max(dim_rows // 4, 1))
    for name, rows in (("big_fact", big_rows), ("small_fact", small_rows)):
        # small_fact hits the rare ids often enough that the join has rows
        keys = rng.integers(0, dim_rows, rows)
        if name == "small_fact":
            keys[: rows // 10] = rng.choice(sorted(rare), rows // 10)
            rng.shuffle(keys)
        fact = pa.table({"d_id": keys.astype(np.int64), "v": rng.integers(0, 1000, rows).astype(np.int64)})
        pq.write_table(fact, folder / f"{name}.parquet", row_group_size=rows // 4)
    return folder
