-- seed: 7 (query 9)
-- workers: 2
-- kind: error
-- differs: BindError: column t1.o_orderkey must appear in GROUP BY or in an aggregate
-- status: fixed (passes at W=1..4 since the planner change of 2026-11-23 02:50 UTC); kept as a regression test
-- original: SELECT t1.o_orderstatus AS c0, max(t1.o_orderkey) FILTER (WHERE t1.o_orderkey BETWEEN 36714 AND 50) AS c1 FROM orders_n AS t1 WHERE t1.o_custkey < (SELECT min(t3.o_custkey) FROM orders_n AS t3 WHERE t3.o_orderkey = t1.o_orderkey) GROUP BY t1.o_orderstatus HAVING count(DISTINCT left(t1.o_orderstatus, 2)) < 1000 ORDER BY 1 NULLS FIRST LIMIT 1
SELECT MAX(t1.o_orderkey) FILTER(WHERE t1.o_orderkey BETWEEN 36714 AND 50) AS c1 FROM orders_n AS t1
