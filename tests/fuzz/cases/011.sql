-- seed: 33 (query 2589)
-- schema: tpch
-- workers: 2
-- kind: wrong
-- note: DuckDB 2.0.0 answered NULL here (EXISTS false although its subquery has 1,000 rows); 2.0.1 fixed it and is the floor in pyproject.toml
-- differs: Results differ for `SELECT AVG(t1.p_partkey) AS c4 FROM part AS t1 WHERE EXISTS(SELECT 1 FROM orders_n AS t7 WHERE t7...` (actual 1 rows x 1 columns, expected 1 rows x 1 columns): rows differ as multisets: 1 row(s) only in actual, e.g. (1000.5); 1 row(s) only in expected, e.g. (None).
-- original: SELECT t1.p_mfgr AS c0, t1.p_size, count(coalesce(t1.p_container, 'F')) AS c2, avg(t1.p_partkey) AS c3, avg(t1.p_partkey) AS c4 FROM part AS t1 WHERE NOT EXISTS (SELECT 1 FROM orders_n AS t7 WHERE (t7.o_custkey <> (SELECT max(t8.n_nationkey) FROM nation AS t8 WHERE t8.n_name IS NULL) OR t7.o_custkey IS NULL)) GROUP BY t1.p_mfgr, t1.p_size ORDER BY 4 DESC NULLS LAST, 5 DESC, 1 DESC NULLS LAST, 3 NULLS FIRST LIMIT 5
SELECT AVG(t1.p_partkey) AS c4 FROM part AS t1 WHERE EXISTS(SELECT 1 FROM orders_n AS t7 WHERE t7.o_custkey <> (SELECT MAX(t8.n_nationkey) FROM nation AS t8 WHERE t8.n_name IS NULL) OR t7.o_custkey IS NULL)
