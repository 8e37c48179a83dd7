-- seed: 4002 (query 3733)
-- workers: 2
-- kind: wrong
-- differs: Results differ for `SELECT RANK() OVER (ORDER BY AVG(t1.s_acctbal)) AS c3 FROM supplier AS t1 FULL JOIN customer_n AS...` (actual 128 rows x 1 columns, expected 128 rows x 1 columns): rows differ as multisets: 21 row(s) only in actual, e.g. (5), (8), (8), ...; 21 row(s) only in expected, e.g. (51), (51), (66), ....
-- fails-at: 2,3,4
-- original: SELECT t2.c_mktsegment AS c0, t1.s_nationkey AS c1, avg(coalesce(t1.s_acctbal, 1000.25)) AS c2, rank() OVER (ORDER BY avg(coalesce(t1.s_acctbal, 1000.25))) AS c3 FROM supplier AS t1 FULL JOIN customer_n AS t2 ON t1.s_nationkey = t2.c_nationkey WHERE EXISTS (SELECT 1 FROM nation AS t3 WHERE t3.n_nationkey = t2.c_nationkey) GROUP BY t2.c_mktsegment, t1.s_nationkey
SELECT RANK() OVER (ORDER BY AVG(t1.s_acctbal)) AS c3 FROM supplier AS t1 FULL JOIN customer_n AS t2 ON t1.s_nationkey = t2.c_nationkey GROUP BY t2.c_mktsegment, t1.s_nationkey
