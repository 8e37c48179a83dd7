-- seed: 33 (query 2589)
-- schema: tpch
-- workers: 2
-- kind: wrong
-- differs: Results differ for `SELECT AVG(t1.p_partkey) AS c4 FROM part AS t1 WHERE EXISTS(SELECT 1 FROM orders_n AS t7 WHERE t7...` (actual 1 rows x 1 columns, expected 1 rows x 1 columns): rows differ as multisets: 1 row(s) only in actual, e.g. (1000.5); 1 row(s) only in expected, e.g. (None).
-- expect: [(1000.5,)]
-- duckdb-wrong: the EXISTS subquery has 1,000 rows (its count(*) says so: o_custkey IS NULL holds for them) yet DuckDB 2.0 evaluates EXISTS as false (it folds the scalar subquery over an empty filter to an empty input of the join); a CI run once saw DuckDB and Squall W>=2 agree, so the right answer is pinned here instead of an xfail on DuckDB's
-- original: SELECT t1.p_mfgr AS c0, t1.p_size, count(coalesce(t1.p_container, 'F')) AS c2, avg(t1.p_partkey) AS c3, avg(t1.p_partkey) AS c4 FROM part AS t1 WHERE NOT EXISTS (SELECT 1 FROM orders_n AS t7 WHERE (t7.o_custkey <> (SELECT max(t8.n_nationkey) FROM nation AS t8 WHERE t8.n_name IS NULL) OR t7.o_custkey IS NULL)) GROUP BY t1.p_mfgr, t1.p_size ORDER BY 4 DESC NULLS LAST, 5 DESC, 1 DESC NULLS LAST, 3 NULLS FIRST LIMIT 5
SELECT AVG(t1.p_partkey) AS c4 FROM part AS t1 WHERE EXISTS(SELECT 1 FROM orders_n AS t7 WHERE t7.o_custkey <> (SELECT MAX(t8.n_nationkey) FROM nation AS t8 WHERE t8.n_name IS NULL) OR t7.o_custkey IS NULL)
