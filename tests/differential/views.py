"""The views the differential tests maintain, over the workload's tables t1, t2 and t3.

t1(a int4, b int4, s text, f float8), t2(a int4, c int8, d date, n numeric),
t3(k int4, name text): small value domains, NULLs in every column.
"""

from __future__ import annotations

from .harness import View

PLANNER_GAP = "the planner refuses this construct (0A000) today"

_EDGES = "SELECT a, b FROM t1 WHERE a IS NOT NULL AND b IS NOT NULL"
_STEP = "SELECT reach.src, t1.b FROM reach JOIN t1 ON reach.dst = t1.a WHERE t1.b IS NOT NULL"

VIEWS = (
    # LATERAL: per row of the items before it (decorrelated by their distinct values).
    View(
        "lateral_top_per_key",
        "SELECT t3.k, x.b FROM t3, LATERAL (SELECT t1.b FROM t1 WHERE t1.a = t3.k "
        "ORDER BY t1.b DESC NULLS LAST LIMIT 2) x",
    ),
    View(
        "lateral_aggregate_per_row",
        "SELECT t3.k, t3.name, x.n, x.s FROM t3, LATERAL (SELECT count(*) AS n, "
        "sum(t2.c) + t3.k AS s FROM t2 WHERE t2.a = t3.k) x",
    ),
    View(
        "left_join_lateral",
        "SELECT t1.a, t1.s, x.c FROM t1 LEFT JOIN LATERAL (SELECT t2.c FROM t2 "
        "WHERE t2.a = t1.a AND t2.c > t1.b) x ON true",
    ),
    View(
        "lateral_series",
        "SELECT t1.a, g FROM t1, generate_series(0, t1.b) AS g WHERE t1.b <= 5",
    ),
    # WITH MUTUALLY RECURSIVE (Materialize's) against PostgreSQL's WITH RECURSIVE: for a
    # UNION (distinct) recursion both are the least fixpoint, so the answers agree.
    View(
        "recursive_reachability",
        f"WITH MUTUALLY RECURSIVE reach (src int4, dst int4) AS ({_EDGES} UNION {_STEP}) "
        "SELECT src, dst FROM reach",
        postgres_sql=f"WITH RECURSIVE reach (src, dst) AS ({_EDGES} UNION {_STEP}) "
        "SELECT src, dst FROM reach",
    ),
    # PostgreSQL's own WITH RECURSIVE, the same SQL on both sides.
    View(
        "with_recursive_paths",
        "WITH RECURSIVE reach (src, dst, hops) AS (SELECT a, b, 1 FROM t1 WHERE a IS NOT NULL "
        "AND b IS NOT NULL UNION ALL SELECT reach.src, t1.b, hops + 1 FROM reach JOIN t1 "
        "ON reach.dst = t1.a WHERE t1.b IS NOT NULL AND hops < 3) "
        "SELECT src, dst, hops, count(*) AS ways FROM reach GROUP BY src, dst, hops",
    ),
    View(
        "recursive_countdown_aggregate",
        "WITH MUTUALLY RECURSIVE down (n int4) AS (SELECT a FROM t1 WHERE a IS NOT NULL "
        "UNION SELECT n - 1 FROM down WHERE n > -2) SELECT count(*) AS c, sum(n) AS s FROM down",
        postgres_sql="WITH RECURSIVE down (n) AS (SELECT a FROM t1 WHERE a IS NOT NULL "
        "UNION SELECT n - 1 FROM down WHERE n > -2) SELECT count(*) AS c, sum(n) AS s FROM down",
    ),
    # A table function in the SELECT list: a row per value, retracted with its input row.
    View(
        "generate_series_per_row",
        "SELECT a, b, generate_series(a, b) AS g FROM t1 WHERE a >= 0 AND b <= 6",
    ),
    # Variance and standard deviation from count, sum and the sum of squares, per group.
    View(
        "spread",
        "SELECT a, stddev(b) AS sd, variance(b) AS v, var_pop(f) AS vp, stddev_pop(f) AS sp "
        "FROM t1 GROUP BY a",
    ),
    # regexp_split_to_table in the SELECT list: a row per piece, retracted with its input row.
    View(
        "regexp_split_per_row",
        "SELECT a, s, regexp_split_to_table(s, '[,_ ]') AS piece FROM t1 WHERE b > 0",
    ),
    View(
        "regexp_split_then_aggregate",
        "SELECT piece, count(*) AS n FROM (SELECT regexp_split_to_table(s, 'p+|,', 'i') AS piece "
        "FROM t1) AS pieces GROUP BY piece",
    ),
    # uuid: values made from text (an md5 digest is uuid input), grouped, compared and joined.
    View(
        "uuid_groups",
        "SELECT md5(s)::uuid AS u, count(*) AS n, min(a) AS lo FROM t1 GROUP BY md5(s)::uuid",
    ),
    View(
        "uuid_join_and_filter",
        "SELECT t1.a, x.u::text AS u FROM t1 JOIN (SELECT md5(name)::uuid AS u FROM t3) AS x "
        "ON md5(t1.s)::uuid = x.u WHERE x.u > '5000000000000000000000000000000F'",
    ),
    # Materialize's unsigned integers (PostgreSQL computes the same numbers in its signed
    # types): sums and maxima kept per group, and 22003 while a negative value is cast.
    View(
        "unsigned_sums",
        "SELECT a, sum((b + 2)::uint4) AS s, max((b + 2)::uint2) AS m, "
        "sum((b + 2)::uint2 * 3::uint2) AS t FROM t1 GROUP BY a",
        postgres_sql="SELECT a, sum(b + 2) AS s, max(b + 2) AS m, sum((b + 2) * 3) AS t "
        "FROM t1 GROUP BY a",
    ),
    # mz_timestamp: dates as milliseconds since the epoch, compared with a number and grouped.
    View(
        "mz_timestamps_of_dates",
        "SELECT d::mz_timestamp AS m, count(*) AS n FROM t2 "
        "WHERE d::mz_timestamp >= 1717200000000 GROUP BY d::mz_timestamp",
        postgres_sql="SELECT (extract(epoch FROM d) * 1000)::int8 AS m, count(*) AS n FROM t2 "
        "WHERE extract(epoch FROM d) * 1000 >= 1717200000000 GROUP BY d",
    ),
    View(
        "unsigned_out_of_range",
        "SELECT a, b::uint4 AS u FROM t1",
        # b * 2^62 * 4 overflows bigint (22003) exactly where b is negative.
        postgres_sql="SELECT a, CASE WHEN b < 0 THEN b * 4611686018427387904 * 4 ELSE b END AS u "
        "FROM t1",
    ),
    # Arrays and lists: aggregated per group (recomputed when a group changes), unnested per
    # row (retracted with it), indexed, searched and printed.
    View(
        "array_agg_per_group",
        "SELECT a, array_agg(s ORDER BY s) AS names, array_agg(b ORDER BY b DESC) AS bs, "
        "array_agg(DISTINCT b ORDER BY b) FILTER (WHERE b > 0) AS positive FROM t1 GROUP BY a",
    ),
    View(
        "array_functions_of_groups",
        "SELECT a, (array_agg(b ORDER BY b))[1] AS lowest, cardinality(array_agg(b)) AS n, "
        "array_to_string(array_agg(s ORDER BY s), ',', '?') AS names, "
        "array_agg(f ORDER BY f)::text AS floats FROM t1 GROUP BY a",
    ),
    View(
        "list_agg_per_group",
        "SELECT a, list_agg(b ORDER BY b) AS l, list_length(list_agg(s)) AS n FROM t1 GROUP BY a",
        postgres_sql="SELECT a, array_agg(b ORDER BY b) AS l, cardinality(array_agg(s)) AS n "
        "FROM t1 GROUP BY a",
    ),
    View("unnest_per_row", "SELECT a, unnest(ARRAY[a, b, NULL]) AS x FROM t1"),
    View(
        "arrays_as_keys",
        "SELECT x.pair, count(*) AS n FROM (SELECT ARRAY[a, b] AS pair FROM t1) AS x "
        "JOIN (SELECT ARRAY[a, a] AS pair FROM t2) AS y ON x.pair = y.pair GROUP BY x.pair",
    ),
    View(
        "unnest_then_aggregate",
        "SELECT x, count(*) AS n FROM (SELECT unnest(ARRAY[s, upper(s)]) AS x FROM t1) AS e "
        "GROUP BY x",
    ),
    View(
        "array_search",
        "SELECT a, b, ARRAY[a, b] @> ARRAY[2] AS has_two, ARRAY[a] && ARRAY[b, 3] AS overlap "
        "FROM t1 WHERE b = ANY(ARRAY[1, 3, a])",
    ),
    View(
        "generate_series_of_times",
        "SELECT a, generate_series(timestamp '2024-01-01', timestamp '2024-01-01 03:00', "
        "interval '1 hour' * a) AS t FROM t1 WHERE a > 0",
    ),
    View(
        "generate_series_of_numerics",
        "SELECT a, generate_series(n, 3, 0.75) AS x FROM t2",
    ),
    # jsonb built from text: grouped by its canonical text, members read with -> and ->>,
    # filtered with @> and ? (compared as PostgreSQL's text of the documents).
    View(
        "jsonb_groups",
        "SELECT j::text AS doc, j -> 'b' ->> 0 AS first_b, jsonb_typeof(j -> 'k') AS kind, "
        "count(*) AS n FROM (SELECT ('{\"k\": ' || coalesce(a, 0) || ', \"b\": [' "
        "|| coalesce(b, 0) || ', 1]}')::jsonb AS j FROM t1) AS d GROUP BY j",
    ),
    View(
        "jsonb_filters",
        "SELECT a, (j -> 'b')::text AS b, jsonb_array_length(j -> 'b') AS len FROM "
        "(SELECT a, ('{\"b\": [' || coalesce(b, 0) || ', 2], \"s\": 1}')::jsonb AS j FROM t1) "
        "AS d WHERE j @> '{\"b\": [2]}' AND j ? 's' AND NOT j @> '{\"b\": [3]}'",
    ),
    # string_agg: the group's text recomputed when any of its rows changes.
    View(
        "string_agg",
        "SELECT a, string_agg(s, ',' ORDER BY s) AS names, "
        "string_agg(s, '|' ORDER BY b DESC, s) AS by_b, count(*) AS n FROM t1 GROUP BY a",
    ),
    View(
        "string_agg_distinct_global",
        "SELECT string_agg(DISTINCT s, ';' ORDER BY s) AS names FROM t1 WHERE b IS NOT NULL",
    ),
    # Months are no fixed duration: added field by field, the day clamped to the month.
    View(
        "calendar_months",
        "SELECT d, d + INTERVAL '1 month' AS next_month, d - INTERVAL '1 year 2 days' AS earlier "
        "FROM t2",
    ),
    # Intervals: months, days and microseconds kept apart through arithmetic, compared by
    # their total span ('1 mon' = '30 days'), printed as PostgreSQL prints them.
    View(
        "interval_arithmetic",
        "SELECT a, d, (d + a * INTERVAL '1 mon 1 day')::text AS shifted, "
        "(d - TIMESTAMP '2024-06-15 12:00')::text AS since, "
        "justify_interval((d - TIMESTAMP '2024-06-15 12:00') * 1.5)::text AS justified, "
        "(age(d, DATE '2024-01-31') / 7)::text AS week_of_age, "
        "extract(epoch FROM age(d, DATE '2024-01-31')) AS seconds, "
        "age(d, DATE '2024-01-31') > INTERVAL '4 mons' AS later "
        "FROM t2 WHERE age(d, DATE '2024-01-01') >= INTERVAL '2 mons' OR a > 3",
    ),
    View(
        "interval_aggregates",
        "SELECT a, sum(d - TIMESTAMP '2024-03-01')::text AS total, "
        "avg(d - TIMESTAMP '2024-03-01')::text AS mean, "
        "min(age(d, DATE '2024-03-31'))::text AS least, "
        "max(age(d, DATE '2024-03-31'))::text AS most, count(*) AS n FROM t2 GROUP BY a",
    ),
    View(
        "interval_join_by_span",
        "SELECT x.a, x.d, g.m AS months FROM t2 x JOIN generate_series(0, 14) AS g(m) "
        "ON date_trunc('month', age(x.d, DATE '2024-01-01')) = g.m * INTERVAL '30 days'",
    ),
    # Groups and DISTINCT by total span: '3 mons', '90 days' and '2160:00:00' are one group.
    View(
        "interval_group_by_span",
        "SELECT count(*) AS n, sum(a) AS s, count(DISTINCT CASE WHEN a > 2 "
        "THEN date_part('month', d) * INTERVAL '30 days' "
        "ELSE date_part('month', d) * INTERVAL '1 mon' END) AS spans FROM t2 "
        "GROUP BY CASE WHEN a > 1 THEN date_part('month', d) * INTERVAL '1 mon' "
        "WHEN a > 0 THEN date_part('month', d) * INTERVAL '720 hours' "
        "ELSE date_part('month', d) * INTERVAL '30 days' END",
    ),
    View(
        "interval_distinct_by_span",
        "SELECT count(*) AS n FROM (SELECT DISTINCT CASE WHEN a > 1 "
        "THEN date_part('month', d) * INTERVAL '1 mon' "
        "ELSE date_part('month', d) * INTERVAL '30 days' END AS m FROM t2) AS spans",
    ),
    # Map, filter, project; NULLs; three-valued logic; CASE.
    View("filter_project", "SELECT a, b, a + b AS s, b * 2 AS d FROM t1 WHERE a > 0"),
    View(
        "nulls",
        "SELECT a, b IS NULL AS b_null, coalesce(b, -1) AS b2, nullif(a, 0) AS z FROM t1",
    ),
    View(
        "three_valued_logic",
        "SELECT a, b, (a > 1 AND b > 1) AS both_big, (a > 1 OR b > 1) AS either_big, "
        "NOT (a > b) AS not_greater FROM t1",
    ),
    View(
        "case",
        "SELECT a, CASE WHEN b > 2 THEN 'big' WHEN b IS NULL THEN 'none' ELSE 'small' END AS size "
        "FROM t1",
    ),
    View(
        "guarded_division",
        "SELECT a, b, CASE WHEN b = 0 THEN NULL ELSE a / b END AS q, "
        "CASE WHEN b = 0 THEN NULL ELSE a % b END AS r FROM t1",
    ),
    View(
        "division_by_zero_is_an_error",
        "SELECT a, b, a / b AS q FROM t1 WHERE a > 0",
    ),
    View(
        "bad_cast_is_an_error",
        "SELECT s, CAST(s AS int4) AS n FROM t1 WHERE s = 'a_b' AND a > 2",
    ),
    View(
        "error_through_an_aggregate",
        "SELECT a, sum(10 / (b - 5)) AS s FROM t1 WHERE a > 0 GROUP BY a",
    ),
    View(
        "error_after_a_join",
        "SELECT t1.a, t2.c / t1.b AS q FROM t1 JOIN t2 ON t1.a = t2.a",
    ),
    View(
        "numbers",
        "SELECT c, n, n * 2 AS n2, abs(c) AS ac, n + c AS nc, c - 1 AS c1 FROM t2 WHERE c > -5",
    ),
    View(
        "floats",
        "SELECT f, abs(f) AS af, ceil(f) AS cf, floor(f) AS ff, round(f) AS rf, "
        "sqrt(abs(f)) AS sf FROM t1",
    ),
    View(
        "casts",
        "SELECT CAST(t1.a AS text) AS a_text, CAST(b AS float8) / 4 AS quarter, "
        "CAST(n AS float8) AS nf FROM t1 JOIN t2 ON t1.a = t2.a",
    ),
    View(
        "dates",
        "SELECT d, d + 7 AS week_later, d - 1 AS day_before FROM t2 WHERE d >= '2024-06-01'",
    ),
    # Strings.
    View(
        "strings",
        "SELECT s, upper(s) AS u, lower(s) AS l, length(s) AS n, substr(s, 2, 3) AS sub, "
        "replace(s, 'a', 'A') AS r, left(s, 2) AS lft, right(s, 2) AS rgt, s || '!' AS bang "
        "FROM t1",
    ),
    View("like", "SELECT s, s LIKE 'a%' AS a, s ILIKE '%AN%' AS an, s LIKE '_p%' AS p FROM t1"),
    View(
        "split_and_starts_with",
        "SELECT s, split_part(s, ',', 2) AS second, starts_with(s, 'ki') AS ki, trim(s) AS t "
        "FROM t1",
    ),
    View("strpos", "SELECT s, strpos(s, 'a') AS p FROM t1"),
    View("pad", "SELECT s, lpad(s, 6, 'xy') AS lp, rpad(s, 4) AS rp FROM t1"),
    View("greatest", "SELECT a, b, greatest(a, b) AS g, least(a, b, 0) AS l FROM t1"),
    View(
        "date_functions", "SELECT d, extract(year FROM d) AS y, date_trunc('month', d) AS m FROM t2"
    ),
    # Joins.
    View("join", "SELECT t1.a, t1.s, t2.c FROM t1 JOIN t2 ON t1.a = t2.a"),
    View(
        "join_three_way",
        "SELECT t1.a, t2.c, t3.name FROM t1, t2, t3 WHERE t1.a = t2.a AND t2.a = t3.k AND t1.b > 0",
    ),
    View(
        "join_with_residual_predicate",
        "SELECT t1.a, t1.b, t2.c FROM t1 JOIN t2 ON t1.a = t2.a WHERE t1.b < t2.c",
    ),
    View(
        "join_on_expression",
        "SELECT t1.a, t2.c FROM t1 JOIN t2 ON t1.a + 1 = t2.a",
    ),
    View(
        "join_across_integer_widths",
        "SELECT t1.a, t1.b, t2.c FROM t1 JOIN t2 ON t1.b = t2.c",
    ),
    View(
        "join_numeric_with_integer",
        "SELECT t1.a, t2.n FROM t1 JOIN t2 ON t1.b = t2.n",
    ),
    View("cross_join_count", "SELECT count(*) AS n, sum(t3.k) AS sk FROM t1, t3"),
    View("self_join", "SELECT x.a, x.b, y.b AS b2 FROM t1 x JOIN t1 y ON x.a = y.b"),
    # Aggregates.
    View(
        "group_by",
        "SELECT a, count(*) AS n, count(b) AS nb, sum(b) AS sb, min(s) AS mins, max(f) AS maxf "
        "FROM t1 GROUP BY a",
    ),
    View(
        "having",
        "SELECT a, avg(b) AS mean, sum(f) AS total FROM t1 GROUP BY a HAVING count(*) > 1",
    ),
    View(
        "global_aggregate", "SELECT count(*) AS n, sum(b) AS sb, max(b) AS mb, min(s) AS ms FROM t1"
    ),
    View("count_distinct", "SELECT a, count(DISTINCT b) AS nb FROM t1 GROUP BY a"),
    View("group_by_expression", "SELECT a % 3 AS m, count(*) AS n FROM t1 GROUP BY a % 3"),
    View(
        "aggregate_over_join",
        "SELECT t3.name, count(*) AS n, sum(t2.c) AS total FROM t2 JOIN t3 ON t2.a = t3.k "
        "GROUP BY t3.name",
    ),
    View(
        "aggregate_of_subquery",
        "SELECT x.a, x.n FROM (SELECT a, count(*) AS n FROM t1 GROUP BY a) x WHERE x.n > 1",
    ),
    View("distinct", "SELECT DISTINCT a, s FROM t1"),
    # Top-k.
    View("top_k", "SELECT a, b, s FROM t1 ORDER BY a DESC, b LIMIT 3", order_columns=(0, 1)),
    View(
        "top_k_offset",
        "SELECT a, c FROM t2 ORDER BY c NULLS FIRST LIMIT 4 OFFSET 2",
        order_columns=(1,),
    ),
    # Set operations.
    View("union_all", "SELECT a FROM t1 UNION ALL SELECT k FROM t3"),
    View("union", "SELECT a FROM t1 UNION SELECT a FROM t2"),
    View("except", "SELECT a FROM t1 EXCEPT SELECT a FROM t2"),
    View("except_all", "SELECT a FROM t1 EXCEPT ALL SELECT k FROM t3"),
    View("intersect", "SELECT a FROM t1 INTERSECT SELECT a FROM t2"),
    View("intersect_all", "SELECT a FROM t1 INTERSECT ALL SELECT k FROM t3"),
    # Outer joins, subqueries, CTEs.
    View("left_join", "SELECT t1.a, t1.s, t3.name FROM t1 LEFT JOIN t3 ON t1.a = t3.k"),
    View("full_join", "SELECT t1.a, t3.k FROM t1 FULL JOIN t3 ON t1.a = t3.k"),
    # A chain of outer joins reads each left input three times: planned as a DAG (linear in
    # the joins), the shared inputs must still give every reader its rows and columns.
    View(
        "left_join_chain",
        "SELECT t1.a, t1.s, x.name, y.c, z.name AS zn, w.d, v.k FROM t1 "
        "LEFT JOIN t3 AS x ON t1.a = x.k "
        "LEFT JOIN t2 AS y ON y.a = t1.a AND y.c > t1.b "
        "LEFT JOIN t3 AS z ON z.k = y.a AND z.name <> x.name "
        "LEFT JOIN t2 AS w ON w.a < t1.b "
        "LEFT JOIN t3 AS v ON v.k = w.a + 1 AND v.name IS NOT NULL",
    ),
    View("in_list", "SELECT a, s FROM t1 WHERE a IN (1, 2, 3)"),
    View("in_subquery", "SELECT a, s FROM t1 WHERE a IN (SELECT k FROM t3)"),
    View("exists", "SELECT k FROM t3 WHERE EXISTS (SELECT 1 FROM t1 WHERE t1.a = t3.k)"),
    View(
        "cte",
        "WITH big AS (SELECT a, b FROM t1 WHERE b > 1) SELECT a, count(*) AS n FROM big GROUP BY a",
    ),
    View("scalar_subquery", "SELECT a, (SELECT count(*) FROM t3) AS n FROM t1"),
    View(
        "not_in_with_nulls",
        "SELECT a, s FROM t1 WHERE a NOT IN (SELECT k FROM t3)",
    ),
    View(
        "not_exists",
        "SELECT k, name FROM t3 WHERE NOT EXISTS (SELECT 1 FROM t2 WHERE t2.a = t3.k)",
    ),
    View(
        "left_join_aggregate",
        "SELECT t3.k, count(t1.a) AS n, sum(t1.b) AS sb FROM t3 LEFT JOIN t1 ON t1.a = t3.k "
        "GROUP BY t3.k",
    ),
    View(
        "right_join",
        "SELECT t2.c, t3.name FROM t2 RIGHT JOIN t3 ON t2.a = t3.k AND t2.c > 0",
    ),
    View(
        "cte_used_twice",
        "WITH g AS (SELECT a, count(*) AS n FROM t1 GROUP BY a) "
        "SELECT x.a, x.n, y.n AS m FROM g x JOIN g y ON x.a = y.a + 1",
    ),
    View(
        "correlated_scalar_subquery",
        "SELECT k, (SELECT max(c) FROM t2 WHERE t2.a = t3.k) AS top FROM t3",
    ),
    View(
        "correlated_count_of_nothing_is_zero",
        "SELECT k, (SELECT count(*) FROM t1 WHERE t1.a = t3.k) AS n FROM t3",
    ),
    View(
        "more_strings",
        "SELECT s, concat(s, '-', a) AS cat, ltrim(s, 'a') AS lt, rtrim(s, 'e') AS rt, "
        "reverse(s) AS rev, repeat(s, 2) AS twice FROM t1",
    ),
    View(
        "more_numbers",
        "SELECT b, mod(b, 3) AS m, power(b, 2) AS p, sign(b) AS sg, trunc(f) AS tf, "
        "CASE WHEN b > 0 THEN ln(b) END AS lnb FROM t1",
    ),
    View(
        "correlated_comparison",
        "SELECT a, b FROM t1 WHERE b > (SELECT avg(b) FROM t1 x WHERE x.a = t1.a)",
    ),
    View(
        "top_k_by_expression",
        "SELECT a, b FROM t1 ORDER BY b + 1 LIMIT 2",
        order_columns=(1,),
    ),
    View(
        "filtered_aggregate",
        "SELECT a, count(*) FILTER (WHERE b > 0) AS positive FROM t1 GROUP BY a",
    ),
    View(
        "not_like_and_is_distinct_from",
        "SELECT a, s FROM t1 WHERE s NOT LIKE 'a%' AND s IS DISTINCT FROM 'kiwi,lime'",
    ),
    View("in_list_with_null", "SELECT a, b FROM t1 WHERE b IN (1, NULL)"),
    View("distinct_on", "SELECT DISTINCT ON (a) a, b FROM t1 ORDER BY a, b"),
    View("join_using", "SELECT a, s, c FROM t1 JOIN t2 USING (a)"),
    View(
        "bool_and_or",
        "SELECT a, bool_and(b > 0) AS all_positive, bool_or(b > 3) AS any_big FROM t1 GROUP BY a",
    ),
    View(
        "join_values",
        "SELECT t1.a, v.label FROM t1 JOIN (VALUES (1, 'one'), (2, 'two'), (2, 'deux')) "
        "AS v(k, label) ON t1.a = v.k",
    ),
    View("like_escape", "SELECT s, s LIKE '%!_%' ESCAPE '!' AS underscore FROM t1"),
    # Window functions. Where a function depends on the order of peers (row_number,
    # lag/lead, first/last/nth_value, ntile, ROWS frames), the window orders by every
    # column: rows still tied are equal, so any order gives PostgreSQL's multiset.
    View(
        "window_ranking",
        "SELECT a, b, s, row_number() OVER (PARTITION BY a ORDER BY b, s, f) AS rn, "
        "rank() OVER (PARTITION BY a ORDER BY b) AS r, "
        "dense_rank() OVER (PARTITION BY a ORDER BY b DESC) AS dr, "
        "percent_rank() OVER (PARTITION BY a ORDER BY b) AS pr, "
        "cume_dist() OVER (PARTITION BY a ORDER BY b NULLS FIRST) AS cd, "
        "ntile(3) OVER (PARTITION BY a ORDER BY b, s, f) AS nt, "
        "row_number() OVER (ORDER BY a DESC, b, s, f) AS global_rn FROM t1",
    ),
    View(
        "window_lag_lead",
        "SELECT a, b, s, f, lag(b) OVER w AS prev, lead(b, 2) OVER w AS next2, "
        "lag(s, 1, 'none') OVER w AS prev_s, lead(f, 1, 0) OVER w AS next_f, "
        "lag(b, -1) OVER w AS back FROM t1 WINDOW w AS (PARTITION BY a ORDER BY b, s, f)",
    ),
    View(
        "window_values",
        "SELECT a, b, s, first_value(s) OVER w AS fv, last_value(s) OVER w AS lv, "
        "nth_value(b, 2) OVER w AS second, "
        "last_value(b) OVER (PARTITION BY a ORDER BY b, s, f "
        "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS final, "
        "nth_value(s, 3) OVER (PARTITION BY a ORDER BY b, s, f "
        "RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS third "
        "FROM t1 WINDOW w AS (PARTITION BY a ORDER BY b, s, f)",
    ),
    View(
        "window_running_aggregates",
        "SELECT a, b, sum(b) OVER w AS sb, count(*) OVER w AS n, count(s) OVER w AS ns, "
        "avg(b) OVER w AS mean, min(s) OVER w AS mins, max(f) OVER w AS maxf, "
        "bool_and(b > 0) OVER w AS all_positive, stddev(f) OVER w AS sd "
        "FROM t1 WINDOW w AS (PARTITION BY a ORDER BY b)",
    ),
    View(
        "window_whole_partition",
        "SELECT a, b, sum(b) OVER (PARTITION BY a) AS sb, count(*) OVER (PARTITION BY a) AS n, "
        "avg(f) OVER (PARTITION BY a) AS mean, min(s) OVER (PARTITION BY a) AS mins, "
        "max(s) OVER () AS maxs, count(b) OVER () AS nb, variance(b) OVER (PARTITION BY a) AS v "
        "FROM t1",
    ),
    View(
        "window_rows_frames",
        "SELECT a, b, s, f, "
        "sum(b) OVER (PARTITION BY a ORDER BY b, s, f "
        "ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS moving, "
        "sum(f) OVER (PARTITION BY a ORDER BY b, s, f ROWS UNBOUNDED PRECEDING) AS running, "
        "max(s) OVER (PARTITION BY a ORDER BY b, s, f "
        "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS rest, "
        "count(b) OVER (PARTITION BY a ORDER BY b, s, f "
        "ROWS BETWEEN 2 PRECEDING AND 1 PRECEDING) AS before, "
        "min(b) OVER (PARTITION BY a ORDER BY b, s, f "
        "ROWS BETWEEN 1 FOLLOWING AND 3 FOLLOWING) AS ahead, "
        "avg(b) OVER (PARTITION BY a ORDER BY b "
        "RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS later "
        "FROM t1",
    ),
    View(
        "window_range_offsets",
        "SELECT a, b, f, sum(f) OVER (PARTITION BY a ORDER BY b "
        "RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS near, "
        "count(*) OVER (ORDER BY b DESC NULLS LAST RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) "
        "AS above, max(s) OVER (PARTITION BY a ORDER BY f "
        "RANGE BETWEEN CURRENT ROW AND 0.5 FOLLOWING) AS by_float FROM t1",
    ),
    View(
        "window_range_of_dates",
        "SELECT a, d, count(*) OVER (PARTITION BY a ORDER BY d "
        "RANGE BETWEEN INTERVAL '60 days' PRECEDING AND CURRENT ROW) AS recent, "
        "sum(c) OVER (ORDER BY d RANGE BETWEEN '30 days' FOLLOWING AND UNBOUNDED FOLLOWING) "
        "AS later FROM t2",
    ),
    View(
        "window_groups_frames",
        "SELECT a, b, sum(f) OVER (PARTITION BY a ORDER BY b GROUPS BETWEEN 1 PRECEDING "
        "AND 1 FOLLOWING) AS near, count(*) OVER (ORDER BY a DESC GROUPS BETWEEN 2 FOLLOWING "
        "AND UNBOUNDED FOLLOWING) AS beyond FROM t1",
    ),
    View(
        "window_over_groups",
        "SELECT a, sum(b) AS sb, rank() OVER (ORDER BY sum(b) DESC NULLS LAST) AS r, "
        "sum(count(*)) OVER (ORDER BY a) AS running FROM t1 GROUP BY a",
    ),
    View(
        "window_filtered_outside",
        "SELECT a, b, s FROM (SELECT a, b, s, "
        "row_number() OVER (PARTITION BY a ORDER BY b DESC, s, f) AS rn FROM t1) x "
        "WHERE rn <= 2 AND a > 0",
    ),
    View(
        "window_after_join",
        "SELECT t1.a, t2.c, sum(t2.c) OVER (PARTITION BY t1.a ORDER BY t2.c) AS running, "
        "dense_rank() OVER (ORDER BY t2.d) AS by_date FROM t1 JOIN t2 ON t1.a = t2.a",
    ),
    View(
        "window_wider_types",
        "SELECT a, c, d, n, sum(c) OVER (PARTITION BY a ORDER BY c) AS sc, "
        "avg(n) OVER (PARTITION BY a) AS an, sum(n) OVER (ORDER BY d, a, c, n) AS sn, "
        "max(d) OVER (PARTITION BY a ORDER BY d, c, n ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) "
        "AS md, lag(d, 1, DATE '2000-01-01') OVER (PARTITION BY a ORDER BY d, c, n) AS prev "
        "FROM t2",
    ),
    View(
        "window_top_k",
        "SELECT a, b, rank() OVER (ORDER BY b DESC NULLS LAST) AS r FROM t1 ORDER BY r LIMIT 3",
        order_columns=(2,),
    ),
    # The window reads no column of t1: its input is pruned to rows of no columns.
    View(
        "window_of_no_columns",
        "SELECT row_number() OVER () AS rn, count(*) OVER () AS n FROM t1",
    ),
    View(
        "window_argument_errors",
        "SELECT k, nth_value(name, k) OVER (ORDER BY k, name) AS v FROM t3",
    ),
    View(
        "window_ntile_of_a_column",
        "SELECT a, b, ntile(a) OVER (PARTITION BY a ORDER BY b, s, f) AS bucket FROM t1",
    ),
)
