-- seed: 7 (query 626)
-- workers: 3
-- kind: wrong
-- differs: Results differ for `SELECT SUM(0.1) AS c0 FROM nation_n AS t1 EXCEPT SELECT SUM(0) AS c0 FROM nation_n AS t3` (actual 1 rows x 1 columns, expected 1 rows x 1 columns): rows differ as multisets: 1 row(s) only in actual, e.g. (3.0); 1 row(s) only in expected, e.g. (2.5).
-- original: SELECT sum(0.1) AS c0 FROM nation_n AS t1 FULL JOIN nation_e AS t2 ON t1.n_regionkey = t2.n_regionkey EXCEPT SELECT sum(0) AS c0 FROM nation_n AS t3 WHERE (t3.n_name IS NULL OR t3.n_nationkey < 16)
SELECT SUM(0.1) AS c0 FROM nation_n AS t1 EXCEPT SELECT SUM(0) AS c0 FROM nation_n AS t3
