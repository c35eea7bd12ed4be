-- Materialize's troubleshooting queries over replica introspection, verbatim: the
-- acceptance test of issue 12 (item 9). Sources are paths in Materialize's repository
-- (github.com/MaterializeInc/materialize). Each entry: "-- name:", "-- source:", an
-- optional "-- skip:" with the reason it cannot run on Loupe, and one statement ending
-- in ";" on its own line's end. Where the source has a placeholder (the Console's
-- ${lit(objectId)}, the docs' <dropped_index_id>) the entry says what stands for it.

-- name: dataflow_elapsed
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Identifying expensive dataflows)
-- Extract raw elapsed time information for dataflows
SELECT
    mdo.id,
    mdo.name,
    mse.elapsed_ns / 1000 * '1 MICROSECONDS'::interval AS elapsed_time
FROM mz_introspection.mz_scheduling_elapsed AS mse,
    mz_introspection.mz_dataflow_operators AS mdo,
    mz_introspection.mz_dataflow_addresses AS mda
WHERE mse.id = mdo.id AND mdo.id = mda.id AND list_length(address) = 1
ORDER BY elapsed_ns DESC;

-- name: operator_elapsed
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Identifying expensive operators in a dataflow)
SELECT
    mdod.id,
    mdod.name,
    mdod.dataflow_name,
    mse.elapsed_ns / 1000 * '1 MICROSECONDS'::interval AS elapsed_time
FROM mz_introspection.mz_scheduling_elapsed AS mse,
    mz_introspection.mz_dataflow_addresses AS mda,
    mz_introspection.mz_dataflow_operator_dataflows AS mdod
WHERE
    mse.id = mdod.id AND mdod.id = mda.id
    -- exclude regions and just return operators
    AND mda.address NOT IN (
        SELECT DISTINCT address[:list_length(address) - 1]
        FROM mz_introspection.mz_dataflow_addresses
    )
ORDER BY elapsed_ns DESC;

-- name: operator_durations_histogram
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Identifying expensive operators in a dataflow)
-- Extract raw scheduling histogram information for operators
WITH histograms AS (
    SELECT
        mdod.id,
        mdod.name,
        mdod.dataflow_name,
        mcodh.count,
        mcodh.duration_ns / 1000 * '1 MICROSECONDS'::interval AS duration
    FROM mz_introspection.mz_compute_operator_durations_histogram AS mcodh,
        mz_introspection.mz_dataflow_addresses AS mda,
        mz_introspection.mz_dataflow_operator_dataflows AS mdod
    WHERE
        mcodh.id = mdod.id
        AND mdod.id = mda.id
        -- exclude regions and just return operators
        AND mda.address NOT IN (
            SELECT DISTINCT address[:list_length(address) - 1]
            FROM mz_introspection.mz_dataflow_addresses
        )

)

SELECT *
FROM histograms
WHERE duration > '100 millisecond'::interval
ORDER BY duration DESC;

-- name: operator_durations_histogram_subscribe
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Identifying expensive operators in a dataflow)
-- skip: COPY (SUBSCRIBE …) TO STDOUT is pgwire's COPY protocol, which Loupe's SQL API does not speak; the query it subscribes to is operator_durations_histogram
-- Observe changes to the raw scheduling histogram information
COPY(SUBSCRIBE(
    WITH histograms AS (
        SELECT
            mdod.id,
            mdod.name,
            mdod.dataflow_name,
            mcodh.count,
            mcodh.duration_ns / 1000 * '1 MICROSECONDS'::interval AS duration
        FROM mz_introspection.mz_compute_operator_durations_histogram AS mcodh,
            mz_introspection.mz_dataflow_addresses AS mda,
            mz_introspection.mz_dataflow_operator_dataflows AS mdod
        WHERE
            mcodh.id = mdod.id
            AND mdod.id = mda.id
            -- exclude regions and just return operators
            AND mda.address NOT IN (
                SELECT DISTINCT address[:list_length(address) - 1]
                FROM mz_introspection.mz_dataflow_addresses
            )

    )

    SELECT *
    FROM histograms
    WHERE duration > '100 millisecond'::interval
) WITH (SNAPSHOT = false, PROGRESS)) TO STDOUT;

-- name: dataflow_arrangement_sizes
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Identifying large arrangements)
-- Extract dataflow records and sizes
SELECT
    s.id,
    s.name,
    s.records,
    pg_size_pretty(s.size) AS size
FROM mz_introspection.mz_dataflow_arrangement_sizes AS s
ORDER BY s.size DESC;

-- name: operator_arrangement_sizes
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Identifying large arrangements)
-- Extract operator records and sizes
SELECT
    mdod.id,
    mdod.name,
    mdod.dataflow_name,
    mas.records,
    pg_size_pretty(mas.size) AS size
FROM mz_introspection.mz_arrangement_sizes AS mas,
    mz_introspection.mz_dataflow_operator_dataflows AS mdod
WHERE mas.operator_id = mdod.id
ORDER BY mas.size DESC;

-- name: worker_skew
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Is work distributed equally across workers?)
-- Get operators where one worker has spent more than 2 times the average
-- amount of time spent. The number 2 can be changed according to the threshold
-- for the amount of skew deemed problematic.
SELECT
    mse.id,
    dod.name,
    mse.worker_id,
    elapsed_ns,
    avg_ns,
    elapsed_ns/avg_ns AS ratio
FROM
    mz_introspection.mz_scheduling_elapsed_per_worker mse,
    (
        SELECT
            id,
            avg(elapsed_ns) AS avg_ns
        FROM
            mz_introspection.mz_scheduling_elapsed_per_worker
        GROUP BY
            id
    ) aebi,
    mz_introspection.mz_dataflow_operator_dataflows dod
WHERE
    mse.id = aebi.id AND
    mse.elapsed_ns > 2 * aebi.avg_ns AND
    mse.id = dod.id
ORDER BY ratio DESC;

-- name: operator_address
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (I found a problematic operator. Where did it come from?)
SELECT * FROM mz_introspection.mz_dataflow_addresses WHERE id=515;

-- name: operator_dataflow
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (I found a problematic operator. Where did it come from?)
-- get id and name of the operator representing the entirety of the dataflow
-- that a problematic operator comes from
SELECT
    mdo.id AS id,
    mdo.name AS name
FROM
    mz_introspection.mz_dataflow_addresses mda,
    -- source of operator names
    mz_introspection.mz_dataflow_operators mdo,
    -- view containing operators representing entire dataflows
    (SELECT
      mda.id AS dataflow_operator,
      mda.address[1] AS dataflow_address
    FROM
      mz_introspection.mz_dataflow_addresses mda
    WHERE
      list_length(mda.address) = 1) dataflows
WHERE
    mda.id = 515
    AND mda.address[1] = dataflows.dataflow_address
    AND mdo.id = dataflows.dataflow_operator;

-- name: dropped_index_dataflows
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Why is Materialize running a dataflow for a dropped index?); the "SET CLUSTER TO <cluster_name>;" before it is left out
SELECT ce.export_id AS dropped_index_id,
       s.name AS dropped_index_name,
       s.id AS dataflow_id
FROM mz_internal.mz_dataflow_arrangement_sizes s
JOIN mz_internal.mz_compute_exports ce ON ce.dataflow_id = s.id
LEFT JOIN mz_catalog.mz_objects o ON o.id = ce.export_id
WHERE o.id IS NULL;

-- name: dropped_index_dependents
-- source: doc/user/content/transform-data/dataflow-troubleshooting.md (Why is Materialize running a dataflow for a dropped index?); <dropped_index_id> is 'u5'
-- skip: mz_internal.mz_compute_dependencies is a compute-controller relation Loupe does not have (not a replica log); "do" is also a reserved word PostgreSQL refuses as an alias
SELECT do.id AS dependent_object_id,
       do.name AS dependent_object_name,
       db.name AS dependent_object_database,
       s.name AS dependent_object_schema
FROM mz_internal.mz_compute_dependencies cd
LEFT JOIN mz_catalog.mz_objects do ON cd.object_id = do.id
LEFT JOIN mz_catalog.mz_schemas s ON do.schema_id = s.id
LEFT JOIN mz_catalog.mz_databases db ON s.database_id = db.id
WHERE cd.dependency_id = 'u5';

-- name: replica_cpu
-- source: doc/user/content/transform-data/troubleshooting.md (Is the cluster overloaded?); <CLUSTER_NAME> is 'quickstart'
-- skip: mz_internal.mz_cluster_replica_utilization (process metrics, not replica introspection) is not in Loupe's catalog
SELECT cru.cpu_percent
FROM mz_internal.mz_cluster_replica_utilization cru
LEFT JOIN mz_catalog.mz_cluster_replicas cr ON cru.replica_id = cr.id
LEFT JOIN mz_catalog.mz_clusters c ON cr.cluster_id = c.id
WHERE c.name = 'quickstart';

-- name: expected_group_size_advice
-- source: doc/user/content/transform-data/optimization.md (Query hints)
SELECT dataflow_name, region_name, levels, to_cut, hint
FROM mz_introspection.mz_expected_group_size_advice
ORDER BY dataflow_name, region_name;

-- name: console_channels
-- source: console/src/api/materialize/useDataflowStructure.ts (channels); ${lit(objectId)} is 'u5'
SELECT
    mdco.id,
    from_operator_id AS "fromOperatorId",
    from_operator_address AS "fromOperatorAddress",
    from_port AS "fromPort",
    to_operator_id AS "toOperatorId",
    to_operator_address AS "toOperatorAddress",
    to_port AS "toPort",
    COALESCE(sum(sent), 0) AS "messagesSent",
    COALESCE(sum(batch_sent), 0) AS "batchesSent",
    mdc.type as "channelType"
FROM
    mz_dataflow_channel_operators AS mdco
    JOIN mz_dataflow_channels AS mdc ON
                    mdc.id = mdco.id
    LEFT JOIN mz_message_counts AS mmc ON
                    mdco.id = mmc.channel_id
    JOIN mz_compute_exports mce ON mce.dataflow_id = from_operator_address[1]
WHERE mce.export_id = 'u5'
GROUP BY
  mdco.id,
  "fromOperatorId",
  "fromOperatorAddress",
  "toOperatorId",
  "toOperatorAddress",
  "fromPort",
  "toPort",
  mdc."type";

-- name: console_operators
-- source: console/src/api/materialize/useDataflowStructure.ts (operators); ${lit(objectId)} is 'u5'
WITH
  export_to_dataflow AS (
    SELECT export_id, id FROM mz_compute_exports AS mce JOIN mz_dataflows AS md ON mce.dataflow_id = md.id
  ),
  all_ops AS (
    SELECT
      e2d.export_id, mdod.id, mda.address, mdod.name, mdop.parent_id AS "parentId",
      coalesce(mas.records, 0) AS "arrangementRecords",
      coalesce(mas.size, 0) AS "arrangementSizes",
      coalesce(mse.elapsed_ns, 0) AS "elapsedNs",
      mlm.lir_id::text AS "lirId",
      mlm.operator AS "lirOperator"
    FROM
      export_to_dataflow AS e2d
      JOIN mz_dataflow_operator_dataflows
                      AS mdod ON e2d.id = mdod.dataflow_id
      LEFT JOIN mz_scheduling_elapsed
                      AS mse ON mdod.id = mse.id
      LEFT JOIN mz_arrangement_sizes
                      AS mas ON mdod.id = mas.operator_id
      LEFT JOIN mz_dataflow_operator_parents
                      AS mdop ON mdod.id = mdop.id
      LEFT JOIN mz_dataflow_addresses
                      AS mda ON mdod.id = mda.id
      LEFT JOIN mz_lir_mapping
                      AS mlm ON mlm.operator_id_start <= mdod.id AND mdod.id < mlm.operator_id_end AND mlm.global_id = export_id
  )
SELECT
  id,
  address,
  name,
  "parentId",
  "arrangementRecords",
  "arrangementSizes",
  "elapsedNs",
  "lirId",
  "lirOperator"
FROM all_ops WHERE export_id = 'u5';

-- name: console_lir_operators
-- source: console/src/api/materialize/useDataflowStructure.ts (lir_operators); ${lit(objectId)} is 'u5'
SELECT lir_id, operator, list_agg(mda.address) AS addresses
FROM
            mz_lir_mapping AS mlm
  LEFT JOIN mz_dataflow_operators AS mdo
    ON (mlm.operator_id_start <= mdo.id
                   AND mdo.id < mlm.operator_id_end)
  JOIN      mz_dataflow_addresses AS mda
    ON mdo.id = mda.id
WHERE mlm.global_id = 'u5'
GROUP BY lir_id, operator;

-- name: console_arrangement_memory
-- source: console/src/api/materialize/cluster/arrangementMemory.ts (buildArrangmentMemoryUsageQuery, as kysely compiles it); arrangmentIds is ['u5'], replicaHeapLimit 1073741824
select "o"."id", "das"."size" as "size", ("das"."size"::float8 / 1073741824) * 100 as "memoryPercentage" from "mz_objects" as "o" inner join "mz_compute_exports" as "ce" on "ce"."export_id" = "o"."id" inner join "mz_dataflow_arrangement_sizes" as "das" on "das"."id" = "ce"."dataflow_id" where "o"."id" in ('u5');

-- name: console_largest_maintained_queries
-- source: console/src/api/materialize/cluster/largestMaintainedQueries.ts (buildLargestMaintainedQueriesQuery, as kysely compiles it); replicaHeapLimit is 1073741824, limit 10
select "o"."id", "o"."name", "s"."size" as "size", ("s"."size"::float8 / 1073741824) * 100 as "memoryPercentage", o.type as "type", "sc"."name" as "schemaName", "da"."name" as "databaseName", "s"."id" as "dataflowId", "s"."name" as "dataflowName" from "mz_dataflow_arrangement_sizes" as "s" inner join "mz_compute_exports" as "ce" on "ce"."dataflow_id" = "s"."id" left join "mz_objects" as "o" on "o"."id" = "ce"."export_id" left join "mz_schemas" as "sc" on "sc"."id" = "o"."schema_id" left join "mz_databases" as "da" on "da"."id" = "sc"."database_id" where "ce"."export_id" not like 't%' order by "memoryPercentage" desc NULLS LAST limit 10;

-- name: explain_analyze_1
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE MEMORY FOR MATERIALIZED VIEW w AS SQL;" prints)
WITH
    summary_memory AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mas.size) AS total_memory,
            sum(mas.records) AS total_records,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN sum(mas.size) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_memory,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN
                                sum(mas.records) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    )
SELECT
    repeat(' ', nesting * 2) || operator AS operator,
    pg_size_pretty(sm.total_memory) AS total_memory,
    sm.total_records AS total_records
FROM
    mz_introspection.mz_lir_mapping AS mlm
        LEFT JOIN summary_memory AS sm USING(global_id, lir_id)
        JOIN
            mz_introspection.mz_mappable_objects AS mo
            ON (mlm.global_id = mo.global_id)
WHERE mo.name = 'materialize.public.w'
ORDER BY mlm.lir_id DESC;

-- name: explain_analyze_2
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE CPU FOR MATERIALIZED VIEW w AS SQL;" prints)
WITH
    summary_cpu AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mse.elapsed_ns) AS total_ns,
            CASE
                    WHEN count(DISTINCT mse.worker_id) <> 0
                            THEN
                                sum(mse.elapsed_ns)
                                / count(DISTINCT mse.worker_id)
                        ELSE NULL
                END
                AS avg_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    )
SELECT
    repeat(' ', nesting * 2) || operator AS operator,
    sc.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed
FROM
    mz_introspection.mz_lir_mapping AS mlm
        LEFT JOIN summary_cpu AS sc USING(global_id, lir_id)
        JOIN
            mz_introspection.mz_mappable_objects AS mo
            ON (mlm.global_id = mo.global_id)
WHERE mo.name = 'materialize.public.w'
ORDER BY mlm.lir_id DESC;

-- name: explain_analyze_3
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE MEMORY, CPU FOR MATERIALIZED VIEW w AS SQL;" prints)
WITH
    summary_memory AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mas.size) AS total_memory,
            sum(mas.records) AS total_records,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN sum(mas.size) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_memory,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN
                                sum(mas.records) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    summary_cpu AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mse.elapsed_ns) AS total_ns,
            CASE
                    WHEN count(DISTINCT mse.worker_id) <> 0
                            THEN
                                sum(mse.elapsed_ns)
                                / count(DISTINCT mse.worker_id)
                        ELSE NULL
                END
                AS avg_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    )
SELECT
    repeat(' ', nesting * 2) || operator AS operator,
    pg_size_pretty(sm.total_memory) AS total_memory,
    sm.total_records AS total_records,
    sc.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed
FROM
    mz_introspection.mz_lir_mapping AS mlm
        LEFT JOIN summary_memory AS sm USING(global_id, lir_id)
        LEFT JOIN summary_cpu AS sc USING(global_id, lir_id)
        JOIN
            mz_introspection.mz_mappable_objects AS mo
            ON (mlm.global_id = mo.global_id)
WHERE mo.name = 'materialize.public.w'
ORDER BY mlm.lir_id DESC;

-- name: explain_analyze_4
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE MEMORY, CPU WITH SKEW FOR MATERIALIZED VIEW w AS SQL;" prints)
WITH
    summary_memory AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mas.size) AS total_memory,
            sum(mas.records) AS total_records,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN sum(mas.size) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_memory,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN
                                sum(mas.records) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    per_worker_memory AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            mas.worker_id AS worker_id,
            sum(mas.size) AS worker_memory,
            sum(mas.records) AS worker_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id, mas.worker_id
    ),
    summary_cpu AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mse.elapsed_ns) AS total_ns,
            CASE
                    WHEN count(DISTINCT mse.worker_id) <> 0
                            THEN
                                sum(mse.elapsed_ns)
                                / count(DISTINCT mse.worker_id)
                        ELSE NULL
                END
                AS avg_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    per_worker_cpu AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            mse.worker_id AS worker_id,
            sum(mse.elapsed_ns) AS worker_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id, mse.worker_id
    )
SELECT
    repeat(' ', nesting * 2) || operator AS operator,
    pwm.worker_id AS worker_id,
    CASE
            WHEN pwm.worker_id IS NOT NULL AND sm.avg_memory <> 0
                    THEN round(pwm.worker_memory / sm.avg_memory, 2)
                ELSE NULL
        END
        AS memory_ratio,
    pg_size_pretty(pwm.worker_memory) AS worker_memory,
    pg_size_pretty(sm.avg_memory) AS avg_memory,
    pg_size_pretty(sm.total_memory) AS total_memory,
    CASE
            WHEN pwm.worker_id IS NOT NULL AND sm.avg_records <> 0
                    THEN round(pwm.worker_records / sm.avg_records, 2)
                ELSE NULL
        END
        AS records_ratio,
    pwm.worker_records AS worker_records,
    sm.avg_records AS avg_records,
    sm.total_records AS total_records,
    CASE
            WHEN pwc.worker_id IS NOT NULL AND sc.avg_ns <> 0
                    THEN round(pwc.worker_ns / sc.avg_ns, 2)
                ELSE NULL
        END
        AS cpu_ratio,
    pwc.worker_ns / 1000 * '1 microsecond'::interval AS worker_elapsed,
    sc.avg_ns / 1000 * '1 microsecond'::interval AS avg_elapsed,
    sc.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed
FROM
    mz_introspection.mz_lir_mapping AS mlm
        LEFT JOIN summary_memory AS sm USING(global_id, lir_id)
        LEFT JOIN per_worker_memory AS pwm USING(global_id, lir_id)
        LEFT JOIN summary_cpu AS sc USING(global_id, lir_id)
        LEFT JOIN per_worker_cpu AS pwc USING(global_id, lir_id)
        JOIN
            mz_introspection.mz_mappable_objects AS mo
            ON (mlm.global_id = mo.global_id)
WHERE mo.name = 'materialize.public.w' AND pwc.worker_id = pwm.worker_id
ORDER BY mlm.lir_id DESC, worker_id;

-- name: explain_analyze_5
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE CPU, MEMORY WITH SKEW FOR MATERIALIZED VIEW w AS SQL;" prints)
WITH
    summary_cpu AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mse.elapsed_ns) AS total_ns,
            CASE
                    WHEN count(DISTINCT mse.worker_id) <> 0
                            THEN
                                sum(mse.elapsed_ns)
                                / count(DISTINCT mse.worker_id)
                        ELSE NULL
                END
                AS avg_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    per_worker_cpu AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            mse.worker_id AS worker_id,
            sum(mse.elapsed_ns) AS worker_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id, mse.worker_id
    ),
    summary_memory AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mas.size) AS total_memory,
            sum(mas.records) AS total_records,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN sum(mas.size) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_memory,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN
                                sum(mas.records) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    per_worker_memory AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            mas.worker_id AS worker_id,
            sum(mas.size) AS worker_memory,
            sum(mas.records) AS worker_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id, mas.worker_id
    )
SELECT
    repeat(' ', nesting * 2) || operator AS operator,
    pwc.worker_id AS worker_id,
    CASE
            WHEN pwc.worker_id IS NOT NULL AND sc.avg_ns <> 0
                    THEN round(pwc.worker_ns / sc.avg_ns, 2)
                ELSE NULL
        END
        AS cpu_ratio,
    pwc.worker_ns / 1000 * '1 microsecond'::interval AS worker_elapsed,
    sc.avg_ns / 1000 * '1 microsecond'::interval AS avg_elapsed,
    sc.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed,
    CASE
            WHEN pwm.worker_id IS NOT NULL AND sm.avg_memory <> 0
                    THEN round(pwm.worker_memory / sm.avg_memory, 2)
                ELSE NULL
        END
        AS memory_ratio,
    pg_size_pretty(pwm.worker_memory) AS worker_memory,
    pg_size_pretty(sm.avg_memory) AS avg_memory,
    pg_size_pretty(sm.total_memory) AS total_memory,
    CASE
            WHEN pwm.worker_id IS NOT NULL AND sm.avg_records <> 0
                    THEN round(pwm.worker_records / sm.avg_records, 2)
                ELSE NULL
        END
        AS records_ratio,
    pwm.worker_records AS worker_records,
    sm.avg_records AS avg_records,
    sm.total_records AS total_records
FROM
    mz_introspection.mz_lir_mapping AS mlm
        LEFT JOIN summary_cpu AS sc USING(global_id, lir_id)
        LEFT JOIN per_worker_cpu AS pwc USING(global_id, lir_id)
        LEFT JOIN summary_memory AS sm USING(global_id, lir_id)
        LEFT JOIN per_worker_memory AS pwm USING(global_id, lir_id)
        JOIN
            mz_introspection.mz_mappable_objects AS mo
            ON (mlm.global_id = mo.global_id)
WHERE mo.name = 'materialize.public.w' AND pwm.worker_id = pwc.worker_id
ORDER BY mlm.lir_id DESC, worker_id;

-- name: explain_analyze_6
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE HINTS FOR INDEX v2_idx_x AS SQL;" prints)
-- skip: LEFT JOIN (generate_series(mlm.…) AS valid_id JOIN … ON …) ON …: a parenthesized join as an outer join's right side, reading the left side laterally; Loupe's planner takes a parenthesized join only first in FROM
SELECT
    repeat(' ', nesting * 2) || operator AS operator,
    megsa.levels AS levels,
    megsa.to_cut AS to_cut,
    megsa.hint AS hint,
    pg_size_pretty(megsa.savings) AS savings
FROM
    mz_introspection.mz_lir_mapping AS mlm
        JOIN
            mz_introspection.mz_dataflow_global_ids AS mdgi
            ON (mlm.global_id = mdgi.global_id)
        LEFT JOIN
            (
                generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                    JOIN
                        mz_introspection.mz_expected_group_size_advice AS megsa
                        ON (megsa.region_id = valid_id)
            )
            ON (megsa.dataflow_id = mdgi.id)
        JOIN
            mz_introspection.mz_mappable_objects AS mo
            ON (mlm.global_id = mo.global_id)
WHERE mo.name = 'materialize.public.v2_idx_x'
ORDER BY mlm.lir_id DESC;

-- name: explain_analyze_7
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE CPU, MEMORY WITH SKEW FOR INDEX v2_idx_x AS SQL;" prints)
WITH
    summary_cpu AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mse.elapsed_ns) AS total_ns,
            CASE
                    WHEN count(DISTINCT mse.worker_id) <> 0
                            THEN
                                sum(mse.elapsed_ns)
                                / count(DISTINCT mse.worker_id)
                        ELSE NULL
                END
                AS avg_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    per_worker_cpu AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            mse.worker_id AS worker_id,
            sum(mse.elapsed_ns) AS worker_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id, mse.worker_id
    ),
    summary_memory AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mas.size) AS total_memory,
            sum(mas.records) AS total_records,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN sum(mas.size) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_memory,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN
                                sum(mas.records) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    per_worker_memory AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            mas.worker_id AS worker_id,
            sum(mas.size) AS worker_memory,
            sum(mas.records) AS worker_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id, mas.worker_id
    )
SELECT
    repeat(' ', nesting * 2) || operator AS operator,
    pwc.worker_id AS worker_id,
    CASE
            WHEN pwc.worker_id IS NOT NULL AND sc.avg_ns <> 0
                    THEN round(pwc.worker_ns / sc.avg_ns, 2)
                ELSE NULL
        END
        AS cpu_ratio,
    pwc.worker_ns / 1000 * '1 microsecond'::interval AS worker_elapsed,
    sc.avg_ns / 1000 * '1 microsecond'::interval AS avg_elapsed,
    sc.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed,
    CASE
            WHEN pwm.worker_id IS NOT NULL AND sm.avg_memory <> 0
                    THEN round(pwm.worker_memory / sm.avg_memory, 2)
                ELSE NULL
        END
        AS memory_ratio,
    pg_size_pretty(pwm.worker_memory) AS worker_memory,
    pg_size_pretty(sm.avg_memory) AS avg_memory,
    pg_size_pretty(sm.total_memory) AS total_memory,
    CASE
            WHEN pwm.worker_id IS NOT NULL AND sm.avg_records <> 0
                    THEN round(pwm.worker_records / sm.avg_records, 2)
                ELSE NULL
        END
        AS records_ratio,
    pwm.worker_records AS worker_records,
    sm.avg_records AS avg_records,
    sm.total_records AS total_records
FROM
    mz_introspection.mz_lir_mapping AS mlm
        LEFT JOIN summary_cpu AS sc USING(global_id, lir_id)
        LEFT JOIN per_worker_cpu AS pwc USING(global_id, lir_id)
        LEFT JOIN summary_memory AS sm USING(global_id, lir_id)
        LEFT JOIN per_worker_memory AS pwm USING(global_id, lir_id)
        JOIN
            mz_introspection.mz_mappable_objects AS mo
            ON (mlm.global_id = mo.global_id)
WHERE mo.name = 'materialize.public.v2_idx_x' AND pwm.worker_id = pwc.worker_id
ORDER BY mlm.lir_id DESC, worker_id;

-- name: explain_analyze_8
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE CLUSTER MEMORY AS SQL;" prints)
WITH
    per_operator_memory_totals AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mas.size) AS total_memory,
            sum(mas.records) AS total_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    object_memory_totals AS
    (
        SELECT
            pomt.global_id AS global_id,
            sum(pomt.total_memory) AS total_memory,
            sum(pomt.total_records) AS total_records
        FROM per_operator_memory_totals AS pomt
        GROUP BY pomt.global_id
    )
SELECT
    mo.name AS object,
    mo.global_id AS global_id,
    pg_size_pretty(omt.total_memory) AS total_memory,
    omt.total_records AS total_records
FROM
    mz_introspection.mz_mappable_objects AS mo
        LEFT JOIN object_memory_totals AS omt USING(global_id)
ORDER BY total_memory DESC, total_records DESC, mo.name DESC;

-- name: explain_analyze_9
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE CLUSTER MEMORY, CPU AS SQL;" prints)
WITH
    per_operator_memory_totals AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mas.size) AS total_memory,
            sum(mas.records) AS total_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    object_memory_totals AS
    (
        SELECT
            pomt.global_id AS global_id,
            sum(pomt.total_memory) AS total_memory,
            sum(pomt.total_records) AS total_records
        FROM per_operator_memory_totals AS pomt
        GROUP BY pomt.global_id
    ),
    per_operator_cpu_totals AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mse.elapsed_ns) AS total_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    object_cpu_totals AS
    (
        SELECT poct.global_id AS global_id, sum(poct.total_ns) AS total_ns
        FROM per_operator_cpu_totals AS poct
        GROUP BY poct.global_id
    )
SELECT
    mo.name AS object,
    mo.global_id AS global_id,
    pg_size_pretty(omt.total_memory) AS total_memory,
    omt.total_records AS total_records,
    oct.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed
FROM
    mz_introspection.mz_mappable_objects AS mo
        LEFT JOIN object_memory_totals AS omt USING(global_id)
        LEFT JOIN object_cpu_totals AS oct USING(global_id)
ORDER BY total_memory DESC, total_records DESC, total_elapsed DESC, mo.name DESC;

-- name: explain_analyze_10
-- source: test/sqllogictest/introspection/singlereplica_attribution_sources.slt (the SQL that "EXPLAIN ANALYZE CLUSTER CPU, MEMORY WITH SKEW AS SQL;" prints)
WITH
    per_operator_cpu_summary AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mse.elapsed_ns) AS total_ns,
            CASE
                    WHEN count(DISTINCT mse.worker_id) <> 0
                            THEN
                                sum(mse.elapsed_ns)
                                / count(DISTINCT mse.worker_id)
                        ELSE NULL
                END
                AS avg_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    per_operator_cpu_per_worker AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            mse.worker_id AS worker_id,
            sum(mse.elapsed_ns) AS worker_ns
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_scheduling_elapsed_per_worker AS mse
                    ON (mse.id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id, mse.worker_id
    ),
    per_operator_cpu_ratios AS
    (
        SELECT
            pocpw.global_id AS global_id,
            pocpw.lir_id AS lir_id,
            pocpw.worker_id AS worker_id,
            CASE
                    WHEN pocpw.worker_id IS NOT NULL AND pocs.avg_ns <> 0
                            THEN round(pocpw.worker_ns / pocs.avg_ns, 2)
                        ELSE NULL
                END
                AS cpu_ratio
        FROM
            per_operator_cpu_per_worker AS pocpw
                JOIN per_operator_cpu_summary AS pocs USING(global_id, lir_id)
    ),
    object_cpu AS
    (
        SELECT
            pocpw.global_id AS global_id,
            pocpw.worker_id AS worker_id,
            max(pomr.cpu_ratio) AS max_operator_cpu_ratio,
            sum(pocpw.worker_ns) AS worker_ns
        FROM
            per_operator_cpu_per_worker AS pocpw
                JOIN
                    per_operator_cpu_ratios AS pomr
                    USING(global_id, worker_id, lir_id)
        GROUP BY pocpw.global_id, pocpw.worker_id
    ),
    object_average_cpu AS
    (
        SELECT
            oc.global_id AS global_id,
            sum(oc.worker_ns) AS total_ns,
            CASE
                    WHEN count(DISTINCT oc.worker_id) <> 0
                            THEN
                                sum(oc.worker_ns) / count(DISTINCT oc.worker_id)
                        ELSE NULL
                END
                AS avg_ns
        FROM object_cpu AS oc
        GROUP BY oc.global_id
    ),
    per_operator_memory_summary AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            sum(mas.size) AS total_memory,
            sum(mas.records) AS total_records,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN sum(mas.size) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_memory,
            CASE
                    WHEN count(DISTINCT mas.worker_id) <> 0
                            THEN
                                sum(mas.records) / count(DISTINCT mas.worker_id)
                        ELSE NULL
                END
                AS avg_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id
    ),
    per_operator_memory_per_worker AS
    (
        SELECT
            mlm.global_id AS global_id,
            mlm.lir_id AS lir_id,
            mas.worker_id AS worker_id,
            sum(mas.size) AS worker_memory,
            sum(mas.records) AS worker_records
        FROM
            mz_introspection.mz_lir_mapping AS mlm
                 CROSS JOIN generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
                JOIN
                    mz_introspection.mz_arrangement_sizes_per_worker AS mas
                    ON (mas.operator_id = valid_id)
        GROUP BY mlm.global_id, mlm.lir_id, mas.worker_id
    ),
    per_operator_memory_ratios AS
    (
        SELECT
            pompw.global_id AS global_id,
            pompw.lir_id AS lir_id,
            pompw.worker_id AS worker_id,
            CASE
                    WHEN pompw.worker_id IS NOT NULL AND poms.avg_memory <> 0
                            THEN round(pompw.worker_memory / poms.avg_memory, 2)
                        ELSE NULL
                END
                AS memory_ratio,
            CASE
                    WHEN pompw.worker_id IS NOT NULL AND poms.avg_records <> 0
                            THEN
                                round(
                                    pompw.worker_records / poms.avg_records, 2
                                )
                        ELSE NULL
                END
                AS records_ratio
        FROM
            per_operator_memory_per_worker AS pompw
                JOIN
                    per_operator_memory_summary AS poms
                    USING(global_id, lir_id)
    ),
    object_memory AS
    (
        SELECT
            pompw.global_id AS global_id,
            pompw.worker_id AS worker_id,
            max(pomr.memory_ratio) AS max_operator_memory_ratio,
            max(pomr.records_ratio) AS max_operator_records_ratio,
            sum(pompw.worker_memory) AS worker_memory,
            sum(pompw.worker_records) AS worker_records
        FROM
            per_operator_memory_per_worker AS pompw
                JOIN
                    per_operator_memory_ratios AS pomr
                    USING(global_id, worker_id, lir_id)
        GROUP BY pompw.global_id, pompw.worker_id
    ),
    object_average_memory AS
    (
        SELECT
            om.global_id AS global_id,
            sum(om.worker_memory) AS total_memory,
            CASE
                    WHEN count(DISTINCT om.worker_id) <> 0
                            THEN
                                sum(om.worker_memory)
                                / count(DISTINCT om.worker_id)
                        ELSE NULL
                END
                AS avg_memory,
            sum(om.worker_records) AS total_records,
            CASE
                    WHEN count(DISTINCT om.worker_id) <> 0
                            THEN
                                sum(om.worker_records)
                                / count(DISTINCT om.worker_id)
                        ELSE NULL
                END
                AS avg_records
        FROM object_memory AS om
        GROUP BY om.global_id
    )
SELECT
    mo.name AS object,
    mo.global_id AS global_id,
    oc.worker_id AS worker_id,
    oc.max_operator_cpu_ratio AS max_operator_cpu_ratio,
    oc.worker_ns / 1000 * '1 microsecond'::interval AS worker_elapsed,
    oac.avg_ns / 1000 * '1 microsecond'::interval AS avg_elapsed,
    oac.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed,
    om.max_operator_memory_ratio AS max_operator_memory_ratio,
    pg_size_pretty(om.worker_memory) AS worker_memory,
    pg_size_pretty(oam.avg_memory) AS avg_memory,
    pg_size_pretty(oam.total_memory) AS total_memory,
    om.max_operator_records_ratio AS max_operator_records_ratio,
    om.worker_records AS worker_records,
    oam.avg_records AS avg_records,
    oam.total_records AS total_records
FROM
    mz_introspection.mz_mappable_objects AS mo
        LEFT JOIN object_cpu AS oc USING(global_id)
        LEFT JOIN object_average_cpu AS oac USING(global_id)
        LEFT JOIN object_memory AS om USING(global_id)
        LEFT JOIN object_average_memory AS oam USING(global_id)
WHERE om.worker_id = oc.worker_id
ORDER BY
    max_operator_cpu_ratio DESC,
    worker_elapsed DESC,
    worker_id,
    max_operator_memory_ratio DESC,
    max_operator_records_ratio DESC,
    worker_memory DESC,
    worker_records DESC,
    mo.name DESC;

