-- seed: 31 (query 1777)
-- schema: tpch
-- workers: 2
-- kind: wrong
-- differs: Results differ for `WITH cte1 AS (SELECT (SELECT SUM(t3.n_regionkey) FROM nation AS t3 WHERE t3.n_nationkey < t2.c_na...` (actual 1500 rows x 1 columns, expected 1500 rows x 1 columns): rows differ as multisets: 61 row(s) only in actual, e.g. (0.0), (0.0), (0.0), ...; 61 row(s) only in expected, e.g. (0.1), (0.1), (0.1), ....
-- status: fixed (an exchanged HUGEINT is read back as HUGEINT, not DECIMAL(38,0), since 2026-11-24); kept as a regression test
-- original: WITH cte1 AS (SELECT (SELECT sum(t3.n_regionkey) FROM nation AS t3 WHERE t3.n_nationkey < t2.c_nationkey) AS c0, strftime(CAST(date_trunc('year', DATE '1995-03-15') AS DATE), '%Y-%m') AS c1, (SELECT count(t4.r_regionkey) FROM region AS t4) AS c2, CASE WHEN 3000 IS NOT NULL THEN TRY_CAST(t1.c_name AS INTEGER) ELSE CAST(t2.c_acctbal AS INTEGER) END AS c3 FROM customer AS t1 LEFT JOIN customer AS t2 ON t1.c_custkey = t2.c_custkey) SELECT coalesce(abs(t5.c0), 0.1) AS c0 FROM cte1 AS t5
WITH cte1 AS (SELECT (SELECT SUM(t3.n_regionkey) FROM nation AS t3 WHERE t3.n_nationkey < t2.c_nationkey) AS c0 FROM customer AS t1 LEFT JOIN customer AS t2 ON t1.c_custkey = t2.c_custkey) SELECT COALESCE(t5.c0, 0.1) AS c0 FROM cte1 AS t5
