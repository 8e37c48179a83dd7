-- seed: 7 (query 62)
-- workers: 3
-- kind: error
-- differs: BindError: column t3.c_mktsegment must appear in GROUP BY or in an aggregate
-- status: fixed (passes at W=1..4 since the planner change of 2026-11-23 02:50 UTC); kept as a regression test
-- original: SELECT CASE WHEN t2.n_comment > 'ASIA' THEN 1 ELSE 0 END AS c0, max(t3.c_custkey) AS c1, sum(DISTINCT 7) AS c2, count(*) FILTER (WHERE t3.c_mktsegment <> 'Supplier#000000010') AS c3 FROM region AS t1 RIGHT JOIN nation AS t2 ON t1.r_regionkey = t2.n_regionkey CROSS JOIN customer AS t3 WHERE t2.n_nationkey < t3.c_nationkey GROUP BY CASE WHEN t2.n_comment > 'ASIA' THEN 1 ELSE 0 END
SELECT COUNT(*) FILTER(WHERE t3.c_mktsegment <> 'Supplier#000000010') AS c3 FROM region AS t1 CROSS JOIN customer AS t3
