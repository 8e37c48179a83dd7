-- seed: 7 (query 950)
-- workers: 3
-- kind: wrong
-- differs: Results differ for `WITH cte1 AS (SELECT (SELECT MIN(t3.s_acctbal) FROM supplier AS t3) AS c0 FROM part AS t1) SELECT...` (actual 1 rows x 2 columns, expected 1 rows x 2 columns): rows differ as multisets: 1 row(s) only in actual, e.g. (-966.20, 1.0921031270570908e-05); 1 row(s) only in expected, e.g. (-966.20, 0.0).
-- original: WITH cte1 AS (SELECT (SELECT min(t3.s_acctbal) FROM supplier AS t3) AS c0 FROM part AS t1) SELECT t4.c0 AS c0, sum(t4.c0) AS c1, stddev(t4.c0) AS c2, rank() OVER (PARTITION BY t4.c0 ORDER BY sum(t4.c0)) AS c3 FROM cte1 AS t4 GROUP BY 1
WITH cte1 AS (SELECT (SELECT MIN(t3.s_acctbal) FROM supplier AS t3) AS c0 FROM part AS t1) SELECT t4.c0 AS c0, STDDEV(t4.c0) AS c2 FROM cte1 AS t4 GROUP BY 1
