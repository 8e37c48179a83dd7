-- seed: 7 (query 1255)
-- workers: 4
-- kind: wrong
-- differs: Results differ for `SELECT SUM(5000) AS c0 FROM region AS t1 UNION SELECT 25.5 AS c0 FROM nation_n AS t3` (actual 2 rows x 1 columns, expected 2 rows x 1 columns): rows differ as multisets: 1 row(s) only in actual, e.g. (26.0); 1 row(s) only in expected, e.g. (25.5).
-- original: SELECT sum(5000) AS c0 FROM region AS t1 WHERE (t1.r_regionkey * 3) = (t1.r_regionkey + t1.r_regionkey) UNION SELECT coalesce(CASE WHEN t3.n_name IN ('UNITED STATES', 'GERMANY', 'FRANCE', 'JAPAN') THEN (10 + 10) ELSE 25.5 END, 150000) AS c0 FROM nation_n AS t3
SELECT SUM(5000) AS c0 FROM region AS t1 UNION SELECT 25.5 AS c0 FROM nation_n AS t3
