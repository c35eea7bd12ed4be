"""Constant expressions: Loupe's one evaluator against a real PostgreSQL.

Each expression is evaluated by Loupe (planner and engine, in process, as a
constant SELECT is) and by PostgreSQL; the value, the type and, for failing
expressions, the SQLSTATE must be PostgreSQL's. Known gaps are listed with
their reason and run as strict xfails, so the list shrinks as they are fixed.
"""

from __future__ import annotations

import json
import math
from decimal import ROUND_HALF_UP, Decimal

import psycopg
import pytest
import sqlglot

from loupe.common.errors import LoupeError
from loupe.common.jsonb import Jsonb
from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.sql.parser import LoupeDialect
from loupe.interval import Interval

from .harness import LOUPE_TYPES

EXPRESSIONS = [
    # Integer arithmetic: truncating division, the sign of %, overflow, division by zero.
    "7 / 2",
    "-7 / 2",
    "7 / -2",
    "-7 % 3",
    "7 % -3",
    "1 / 0",
    "1 % 0",
    "2147483647 + 1",
    "-2147483648 - 1",
    "2147483647 * 2",
    "9223372036854775807 + 1",
    "2147483647::int8 + 1",
    "(-2147483648) / -1",
    "abs(-2147483648)",
    "- (-2147483648)",
    # Casts: rounding, overflow, bad input.
    "3.5::int",
    "2.5::int",
    "-2.5::int",
    "CAST('abc' AS int)",
    "CAST(' 42 ' AS int)",
    "CAST('2147483648' AS int)",
    "CAST(NULL AS boolean)::text",
    "true::text",
    "CAST(1.5e10 AS int)",
    "'t'::boolean",
    "CAST('maybe' AS boolean)",
    "'2024-02-30'::date",
    "'2024-02-29'::date + 1",
    "date '2024-03-01' - date '2024-02-01'",
    # Mixed-type arithmetic and promotion.
    "1 + 1.5",
    "1 + 1.5::float8",
    "7 / 2.0",
    "2 ^ 10",
    "sqrt(16)",
    "sqrt(-1)",
    "ln(0)",
    "log(100)",
    "power(2, 3)",
    "round(2.5)",
    "round(-2.5)",
    "round(2.5::float8)",
    "round(1.2345, 2)",
    "trunc(-1.7)",
    "ceil(1.2)",
    "floor(-1.2)",
    "sign(-3)",
    # numeric is exact: values, result types, errors.
    "0.1 + 0.2 = 0.3",
    "0.1::numeric + 0.2::numeric",
    "12345678901234567.89 + 0.01",
    "123456789012345678.5 - 0.25",
    "1.10 * 3",
    "1.5 * 2.25",
    "0.001 * 0.001",
    "7.5 / 2.5",
    "1 / 4.0",
    "(SELECT sum(x) / 7 FROM (VALUES (14.0)) t(x))",
    "10 % 3.5",
    "-7.5 % 2",
    "-(2.50)",
    "2::int8 + 1.5",
    "1.5 + 1::float8",
    "1.5 < 2",
    "1.5 = 1.50",
    "2.5::int",
    "(-2.5)::numeric::int8",
    "99999999999.5::int",
    "0.1::float8::numeric",
    "'12.340'::numeric",
    "' -0.5 '::numeric",
    "'abc'::numeric",
    "'1.5e3'::numeric",
    "1.0 / 0",
    "1.0 % 0",
    "round(1.23456, 3)",
    "round(-1.5)",
    "round(1250, -2)",
    "trunc(-1.789, 2)",
    "abs(-1.25)",
    "2.675::numeric(10,2)",
    "-2.675::numeric(10,2)",
    "12345.6::numeric(4,1)",
    "1.5::decimal(3)",
    "(SELECT sum(x) FROM (VALUES (2.675)) t(x))::numeric(10,2)",
    "(SELECT sum(x) FROM (VALUES (0.1), (0.2), (0.3)) t(x))",
    "(SELECT sum(x::int8) FROM (VALUES (9223372036854775807), (1)) t(x))",
    "(SELECT avg(x) FROM (VALUES (1), (2), (4)) t(x))",
    "(SELECT avg(x) FROM (VALUES (0.1), (0.2)) t(x))",
    "(SELECT min(x) FROM (VALUES (1.25), (-0.5)) t(x))",
    "(SELECT max(x) FROM (VALUES (1.25), (-0.5)) t(x))",
    # time and timestamp (without time zone) stay without a zone.
    "TIME '03:04:05' < TIME '04:00'",
    "'2024-01-02 03:04:05'::timestamp::time",
    "(TIME '03:04:05.5')::text",
    "'2024-01-02 03:04:05'::timestamp::text",
    "'2024-01-02 03:04:05+02'::timestamptz::timestamp",
    # Strings.
    "'a_c' LIKE 'a\\_c'",
    "'abc' LIKE 'a%'",
    "'ABC' ILIKE 'a%'",
    "'abc' || 'def'",
    "'abc' || NULL",
    "concat('a', NULL, 'b')",
    "length('héllo')",
    "upper('abc')",
    "substr('hello', 2, 3)",
    "substr('hello', 0)",
    "position('l' in 'hello')",
    "replace('hello', 'l', 'L')",
    "lpad('7', 3, '0')",
    "split_part('a,b,c', ',', 2)",
    "trim('  x  ')",
    "repeat('ab', 3)",
    # Trigonometry and angles (float8 in and out; 22003 outside the domain).
    "sin(1)",
    "cos(0.5)",
    "tan(-2)",
    "cot(0)",
    "cot(1)",
    "asin(0.5)",
    "asin(2)",
    "acos(-1.5)",
    # (1e308 as a numeric is past Loupe's numeric range, |x| < 10^22: see the README.)
    "atan(1e308::float8)",
    "sin('inf'::float8)",
    "cos('NaN'::float8)",
    "sinh(1000)",
    "cosh(-2)",
    "tanh(1000)",
    "asinh(1)",
    "acosh(0.5)",
    "acosh(2)",
    "atanh(1)",
    "atanh(2)",
    "atanh(NULL)",
    "degrees(1)",
    "degrees(1::numeric)",
    "radians(180)",
    "degrees(1e308::float8)",
    # Characters and digests.
    "ascii('é')",
    "ascii('')",
    "ascii('abc')",
    "ascii(NULL)",
    "chr(65)",
    "chr(233)",
    "chr(0)",
    "chr(-1)",
    "chr(1114112)",
    "chr(55296)",
    "chr(NULL)",
    "md5('abc')",
    "md5('')",
    "md5(NULL)",
    "ascii(65)",
    "md5(1)",
    "chr(1.5)",
    "chr(65::int8)",
    "chr('a')",
    # || takes one text operand and anything else as its text.
    "1 || 2",
    "1 || 'a'",
    "'a' || true",
    "'a' || 1.5::float8",
    "'a' || date '2024-01-02'",
    "NULL || 1",
    # to_char's template patterns (a date is a timestamptz, its zone UTC).
    "to_char(timestamp '2024-03-05 14:07:09.123456', 'YYYY-MM-DD HH24:MI:SS.MS US')",
    "to_char(timestamp '2024-03-05 04:07:09', 'Day, DD Month YYYY HH12:MI AM')",
    "to_char(timestamp '2024-03-05 04:07:09', 'FMDay, FMDD FMMonth YYYY FMHH12 pm')",
    "to_char(timestamptz '2024-03-05 04:07:09+00', 'YYYY TZ tz OF')",
    "to_char(timestamp '2024-03-05 04:07:09', 'YYYY TZ OF|')",
    "to_char(date '2024-03-01', 'DDth DDTH FMDDth Dy dy DY Mon mon MON MONTH month')",
    "to_char(timestamp '2024-12-30 00:00:00', 'IYYY IW ID D DDD WW W Q CC J SSSS')",
    "to_char(timestamp '0005-01-01', 'YYYY YYY YY Y')",
    "to_char(timestamp '2024-01-01 12:00', '\"quoted YYYY\" HH12 AM a.m. P.M.')",
    "to_char(timestamp '2024-01-01 12:00:00.5', 'FF1 FF3 FF6 ssss hh mi yyyy')",
    "to_char(timestamp '2024-06-01 00:00', 'FMYYYY FMMM FMDD FMHH24 FMMI FMSS FMMS FMUS FMD FMDDD')",
    "to_char(timestamp '2024-01-01', 'Y,YYY BC AD b.c. a.d. TZH:TZM RM rm')",
    "to_char(timestamp '2024-01-11', 'DDth') || to_char(timestamp '2024-01-22', 'DDth')",
    "to_char(timestamp '2024-01-01', '')",
    "to_char(timestamp '2024-01-01', NULL)",
    "to_char(NULL::timestamp, 'YYYY')",
    # to_timestamp, make_timestamp, date_bin.
    "to_timestamp(0)",
    "to_timestamp(1.5e9)",
    "to_timestamp(-1.25)",
    "to_timestamp('NaN')",
    "to_timestamp(1e20)",
    "to_timestamp(NULL)",
    "make_timestamp(2024, 2, 29, 12, 30, 15.5)",
    "make_timestamp(2024, 2, 30, 12, 30, 15.5)",
    "make_timestamp(2024, 13, 1, 0, 0, 0)",
    "make_timestamp(2024, 2, 28, 24, 0, 0)",
    "make_timestamp(2024, 2, 28, 23, 60, 0)",
    "make_timestamp(2024, 2, 28, 23, 0, 60)",
    "make_timestamp(2024, 2, 28, 23, 59, 60.5)",
    "make_timestamp(0, 2, 28, 23, 0, 1)",
    "date_bin('15 minutes', timestamp '2020-02-11 15:44:17', timestamp '2001-01-01')",
    "date_bin('15 minutes', timestamp '2000-02-11 15:44:17', timestamp '2001-01-01 00:02:30')",
    "date_bin('1 month', timestamp '2000-02-11 15:44:17', timestamp '2001-01-01')",
    "date_bin('0 minutes', timestamp '2000-02-11 15:44:17', timestamp '2001-01-01')",
    "date_bin('-5 minutes', timestamp '2000-02-11 15:44:17', timestamp '2001-01-01')",
    "date_bin('1 day', timestamptz '2000-02-11 15:44:17+00', timestamptz '2001-01-01 03:00:00+00')",
    "date_bin('1 day', date '2000-02-11', timestamp '2001-01-01')",
    "date_bin(NULL, timestamp '2000-02-11 15:44:17', timestamp '2001-01-01')",
    # Fields of intervals keep the interval's sign; date_part is float8, extract numeric.
    "extract(hour from timestamp '2024-01-01' - timestamp '2024-01-02 02:30:00')",
    "extract(day from timestamp '2024-01-01' - timestamp '2024-01-02 02:30:00')",
    "extract(minute from timestamp '2024-01-01' - timestamp '2024-01-02 02:30:00')",
    "extract(epoch from timestamp '2024-01-01' - timestamp '2024-01-02 02:30:00.5')",
    "extract(second from timestamp '2024-01-01' - timestamp '2024-01-02 02:30:10.5')",
    "extract(milliseconds from timestamp '2024-01-01' - timestamp '2024-01-02 02:30:10.5')",
    "extract(microseconds from interval '1 day 00:00:10.5')",
    "extract(month from interval '40 days')",
    "extract(year from interval '400 days')",
    "extract(quarter from interval '1 day')",
    "extract(dow from interval '1 day')",
    "date_part('hour', interval '1 day 3 hours')",
    "date_part('day', date '2024-03-01')",
    "date_part('doy', timestamp '2024-03-01')",
    "date_part(NULL, date '2024-03-01')",
    # An interval literal's clock counts (sqlglot read '1 day 02:30' as '1 day').
    "interval '1 day 00:00:10.5'",
    "timestamp '2024-01-01' + interval '1 day 02:30'",
    "interval '-1 day 02:00'",
    # date_trunc of intervals: each field toward zero; "-1 days" is plural in PostgreSQL.
    "date_trunc('hour', interval '1 day 02:30:15')",
    "date_trunc('hour', interval '-1 day -02:30:15')",
    "date_trunc('minute', interval '-02:30:15.5')",
    "date_trunc('milliseconds', interval '00:00:15.75555')",
    "date_trunc('day', interval '3 days 02:30')",
    "date_trunc('month', interval '3 days 02:30')",
    "date_trunc('week', interval '3 days')",
    "date_trunc('hour', NULL::interval)",
    "(timestamp '2024-01-01' - timestamp '2024-01-02')::text",
    "(timestamp '2024-01-01' - timestamp '2024-01-02 01:00')::text",
    # justify_*, interval arithmetic (intervals without months).
    "justify_hours(interval '50 hours')",
    "justify_hours(interval '-50 hours')",
    "justify_hours(NULL)",
    "justify_days(interval '29 days')",
    "justify_days(interval '35 days')",
    "justify_interval(interval '-1 day 2 hours')",
    "justify_interval(interval '-1 day 2 hours')::text",
    "interval '1 day' * 1.5",
    "interval '1 day' / 3",
    "interval '3 days 5 hours' / 7",
    "interval '1 hour' * 0.3333333",
    "(timestamp '2024-03-01' - timestamp '2024-01-01 10:00')::text",
    "interval '25 hours'::text",
    "age(timestamp '2024-03-01', timestamp '2023-01-15')",
    "date '2024-01-31' + interval '1 month'",
    # Intervals as PostgreSQL's months, days and microseconds: input, text output, equality
    # and order by total span, arithmetic field by field, fractions cascading down.
    "interval '1 year 2 mons 3 days 04:05:06'",
    "interval '-1 day +02:00'",
    "interval '1 day -00:00:01'",
    "interval '1.5 months'",
    "interval '1.5 years'",
    "interval '0.5 weeks'",
    "interval '@ 3 days 2 hours ago'",
    "interval '-1 mons -2 days -03:04:05.678'",
    "interval '90' day",
    "'1 d 2 h 3 min'::interval",
    "'1-2'::interval",
    "'-1-2'::interval",
    "'P1Y2M3DT4H5M6.5S'::interval",
    "'PT36H'::interval",
    "'P0001-02-03T04:05:06'::interval",
    "'P'::interval",
    "'1 day 1 day'::interval",
    "'1 2'::interval",
    "'2 days 25:00 ago'::interval",
    "'2 fortnights'::interval",
    "'1 mon 2'::interval",
    "'2147483648 days'::interval",
    "'178000000 years'::interval",
    "interval '1 month' = interval '30 days'",
    "interval '1 month' < interval '31 days'",
    "interval '1 day' = interval '24 hours'",
    "interval '1 year' > interval '360 days'",
    "interval '-1 mon' < interval '-29 days'",
    "interval '1 mon' <> interval '30 days 00:00:01'",
    "interval '1 mon' BETWEEN interval '30 days' AND interval '720 hours'",
    "nullif(interval '1 mon', interval '30 days')",
    "greatest(interval '1 mon', interval '29 days', interval '721 hours')",
    "least(interval '1 mon', NULL, interval '-1 day')",
    "interval '1 mon 2 days' + interval '3 hours'",
    "interval '1 mon' - interval '1 day'",
    "-interval '1 year 1 day 00:00:01'",
    "interval '1 mon' * 1.5",
    "interval '1 mon 1 day' * 0.3",
    "interval '1 year' / 5",
    "interval '3 mons' / 2.5",
    "interval '1 day' * -2.25",
    "2 * interval '1 mon 1 hour'",
    "interval '1 mon' / 0",
    "interval '2147483647 days' + interval '1 day'",
    "interval '2000000000 mons' * 2",
    "-interval '-2147483648 days'",
    "interval '1 hour' * 'NaN'::float8",
    "timestamp '2024-01-31 10:00' + interval '1 mon 1 day 01:00'",
    "timestamp '2024-03-31' - interval '1 mon'",
    "date '2024-02-29' + interval '1 year'",
    "date '2024-02-29' - interval '1 year 1 day'",
    "interval '1 mon' + date '2024-01-30'",
    "timestamp '2024-01-01' + interval '178000000 years'",
    "date '2024-01-01' - interval '2000000000 mons'",
    "timestamp '2024-01-01' + interval '2147483647 days'",
    "timestamp '2024-03-01' - timestamp '2024-02-28 12:00'",
    "timestamp '2024-02-28 12:00' - timestamp '2024-03-01'",
    "time '10:00' + interval '1 day 15 hours'",
    "time '10:00' - time '12:30'",
    "(interval '25 hours')::time",
    "(interval '-1 day -01:00')::time",
    "(time '10:00:01.5')::interval",
    "justify_hours(interval '1 mon 50 hours')",
    "justify_hours(interval '1 day -1 hour')",
    "justify_days(interval '-35 days')",
    "justify_days(interval '1 mon -1 day')",
    "justify_interval(interval '1 mon -1 hour')",
    "justify_interval(interval '-1 mon 61 days 25 hours')",
    "age(timestamp '2024-02-29', timestamp '2023-03-31 23:00')",
    "age(timestamp '2023-01-15', timestamp '2024-03-01')",
    "age(date '2024-03-01', date '2024-01-31')",
    "age(timestamptz '2024-03-01 00:00:00+00', timestamptz '2023-12-31 12:00:00+00')",
    "extract(year from interval '1 year 14 mons')",
    "extract(month from interval '-14 mons')",
    "extract(quarter from interval '7 mons')",
    "extract(day from interval '1 mon 40 days')",
    "extract(hour from interval '-25 hours')",
    "extract(epoch from interval '1 year 2 mons 3 days 04:05:06.5')",
    "date_part('epoch', interval '-1 mon 1 day')",
    "extract(century from interval '250 years')",
    "date_trunc('year', interval '1 year 14 mons 3 days')",
    "date_trunc('quarter', interval '1 year 8 mons 3 days')",
    "date_trunc('month', interval '-1 year -5 mons -3 days')",
    "date_trunc('decade', interval '25 years 3 mons')",
    "date_trunc('day', interval '1 mon 3 days 04:00')",
    "date_bin(interval '1 mon', timestamp '2024-01-15', timestamp '2024-01-01')",
    "(interval '1 mon 1 day')::text",
    "time '10:00' - time '12:30'",
    "(interval '25 hours')::time",
    "(interval '-1 day -01:00')::time",
    "(time '10:00:01.5')::interval",
    "interval '1 hour' + time '23:30'",
    "('-1 year -2 mons +3 days'::interval)::text",
    "cast('1 mon' as interval) = cast('30 days' as interval)",
    "timestamp '2024-07-01 12:00' at time zone interval '1 day'",
    # AT TIME ZONE / timezone(): skipped local times take the offset before the change,
    # repeated ones the later instant; numeric zones are POSIX (positive is west).
    "timestamp '2024-03-10 02:30' at time zone 'America/New_York'",
    "timestamp '2024-11-03 01:30' at time zone 'America/New_York'",
    "timestamptz '2024-11-03 05:30:00+00' at time zone 'America/New_York'",
    "timestamp '2024-07-01 12:00' at time zone 'EST'",
    "timestamp '2024-07-01 12:00' at time zone 'UTC+5'",
    "timestamp '2024-07-01 12:00' at time zone '+05'",
    "timestamp '2024-07-01 12:00' at time zone 'nowhere'",
    "timezone('Europe/Paris', timestamptz '2024-07-01 12:00:00+00')",
    "date '2024-07-01' at time zone 'Europe/Paris'",
    "timestamp '2024-07-01 12:00' at time zone 'europe/paris'",
    "timestamp '2024-07-01 12:00' at time zone interval '-05:00'",
    "timestamptz '2024-07-01 12:00:00+00' at time zone interval '-05:00'",
    "NULL::timestamp at time zone 'UTC'",
    # Logic and NULLs.
    "NOT 1 IS NOT NULL",
    "NOT NULL IS NULL",
    "NULL AND false",
    "NULL OR true",
    "NULL = NULL",
    "1 IS DISTINCT FROM NULL",
    "coalesce(NULL, 2, 3)",
    "nullif(1, 1)",
    "greatest(1, 5, 3)",
    "least(1, NULL, 3)",
    "CASE WHEN 1 > 2 THEN 'a' ELSE 'b' END",
    "CASE WHEN true THEN 1 ELSE 1 / 0 END",
    "1 IN (1, 2, NULL)",
    "3 IN (1, 2, NULL)",
    "3 NOT IN (1, 2)",
    "2 BETWEEN 1 AND 3",
    # uuid: input in any case, with braces or hyphens after any four digits; 22P02 otherwise.
    "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid",
    "'{a0eebc999c0b4ef8bb6d6bb9bd380a11}'::uuid::text",
    "'a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11'::uuid",
    "' a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1'::uuid",
    "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-'::uuid",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380g11'::uuid",
    "1::uuid",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid::int",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid < 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid = 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'",
    "md5('x')::uuid",
    "NULL::uuid",
    # Arrays: constructors, text input and output (PostgreSQL's quoting), subscripts,
    # lengths, containment, = ANY.
    "ARRAY[1, 2, NULL]",
    "ARRAY[1, 2, NULL]::text",
    "ARRAY['a b', '', 'NULL', 'x\"y', 'back\\slash', 'p', NULL]::text",
    "ARRAY[true, false]::text",
    "ARRAY[1.5::float8, 2]",
    "ARRAY[date '2024-01-02']::text",
    "ARRAY[timestamp '2024-01-02 03:04:05']::text",
    "ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid]::text",
    "'{1, 2 ,NULL}'::int[]",
    "'{}'::int[]",
    "'{}'::int[]::text",
    '\'{"a,b",c, d ,""}\'::text[]',
    '\'{"a,b",c, d ,""}\'::text[]::text',
    "'{1,x}'::int[]",
    "'{1'::int[]",
    "'1,2'::int[]",
    "'{1,2}}'::int[]",
    "'{99999999999}'::int[]",
    "ARRAY[1, 2]::int8[]",
    "ARRAY['1', '2']::int[]",
    "ARRAY['1', 'x']::int[]",
    "(ARRAY[10, 20, 30])[2]",
    "(ARRAY[10, 20])[0]",
    "(ARRAY[10, 20])[3]",
    "(ARRAY[10, 20])[-1]",
    "(ARRAY['a', 'b'])[NULL::int]",
    "array_length(ARRAY[1, 2, 3], 1)",
    "array_length(ARRAY[1, 2, 3], 2)",
    "array_length('{}'::int[], 1)",
    "cardinality(ARRAY[1, 2])",
    "cardinality('{}'::int[])",
    "array_to_string(ARRAY[1, NULL, 3], ',')",
    "array_to_string(ARRAY[1, NULL, 3], ',', '*')",
    "array_to_string(ARRAY[true, NULL], '-', NULL)",
    "array_to_string(NULL::int[], ',')",
    "ARRAY[1, 2] @> ARRAY[2]",
    "ARRAY[1, NULL] @> ARRAY[NULL]::int[]",
    "ARRAY[1, 2] @> '{}'::int[]",
    "ARRAY[1] <@ ARRAY[1, 2]",
    "ARRAY[1, 2] && ARRAY[3]",
    "ARRAY[1, 2] && ARRAY[2, 5]",
    "ARRAY['a'] @> ARRAY[1]",
    "2 = ANY(ARRAY[1, 2])",
    "3 = ANY(ARRAY[1, NULL])",
    "3 = ANY(ARRAY[1, 2])",
    "NULL = ANY(ARRAY[1])",
    "1 = ANY('{}'::int[])",
    "'b' = ANY('{a,b}'::text[])",
    "ARRAY[1, 2]::text[]",
    "1::int[]",
    # Arrays compare element by element (a NULL element after every value, a prefix first);
    # || concatenates, appends or prepends (a NULL array is empty).
    "ARRAY[1, 2] < ARRAY[1, 3]",
    "ARRAY[1] < ARRAY[1, 2]",
    "ARRAY[1, NULL] > ARRAY[1, 5]",
    "ARRAY[1, NULL] = ARRAY[1, NULL]",
    "ARRAY[1] <> ARRAY[1, NULL]",
    "ARRAY['b'] >= ARRAY['a', 'z']",
    "ARRAY[1, 2] || ARRAY[3]",
    "ARRAY[1] || 2",
    "0 || ARRAY[1]",
    "NULL::int[] || ARRAY[1]",
    "ARRAY[1] || NULL::int",
    "NULL::int[] || NULL::int[]",
    "ARRAY[1] || ARRAY['x']",
    "ARRAY[[1, 2], [3, 4]]",
    # jsonb: PostgreSQL's canonical text (keys by length then bytes, last duplicate wins),
    # ->, ->>, ?, @>, <@, jsonb_typeof, jsonb_array_length, casts.
    '\'{"b": [1, 2], "a":1, "aa": {"z":null,"y":"x\\n"}}\'::jsonb',
    '\'{"b": [1, 2], "a":1, "aa": {"z":null,"y":"x\\n"}}\'::jsonb::text',
    '\'{"a":1.50, "c": 1e2, "d": -0, "e": 0.1e1, "é": true}\'::jsonb::text',
    '\'{"k": 1, "k": 2}\'::jsonb::text',
    "'[]'::jsonb::text",
    "' \"sp ace\" '::jsonb::text",
    "'{bad'::jsonb",
    "'NaN'::jsonb",
    "'{\"a\": {\"b\": 2}}'::jsonb -> 'a'",
    "'{\"a\": {\"b\": 2}}'::jsonb -> 'a' ->> 'b'",
    "'[1, 2, 3]'::jsonb -> -1",
    "'[1, 2, 3]'::jsonb -> 5",
    "'[1, 2, 3]'::jsonb -> 'a'",
    "'{\"a\": 1}'::jsonb -> 0",
    "'\"s\"'::jsonb -> 0",
    "'\"s\"'::jsonb -> -1",
    "'\"s\"'::jsonb -> 1",
    "'null'::jsonb -> 0",
    "'5'::jsonb ->> 0",
    "'{\"a\": \"x\"}'::jsonb ->> 'a'",
    "'{\"a\": null}'::jsonb ->> 'a'",
    "'{\"a\": null}'::jsonb -> 'a'",
    "'{\"a\": [1, \"x\"]}'::jsonb ->> 'a'",
    '\'{"a":1,"b":2}\'::jsonb @> \'{"a":1}\'',
    "'[1, 2, [1, 3]]'::jsonb @> '[1, 3]'",
    "'[1, 2, [1, 3]]'::jsonb @> '[[1, 3]]'",
    "'[1, 2]'::jsonb @> '1'",
    "'{\"a\": [1, 2]}'::jsonb @> '{\"a\": 1}'",
    "'{\"a\": 1.0}'::jsonb @> '{\"a\": 1}'",
    '\'{"a":1}\'::jsonb <@ \'{"a":1,"b":2}\'',
    "'{\"a\":1}'::jsonb ? 'a'",
    "'[\"a\"]'::jsonb ? 'a'",
    "'\"a\"'::jsonb ? 'a'",
    "'{\"b\": {\"a\": 1}}'::jsonb ? 'a'",
    "jsonb_typeof('[1]')",
    "jsonb_typeof('{\"k\": [1]}'::jsonb -> 'k')",
    "jsonb_typeof('1.5'::jsonb)",
    "jsonb_typeof('null'::jsonb)",
    "jsonb_typeof('{}'::jsonb -> 'x')",
    "jsonb_array_length('[1, 2]')",
    "jsonb_array_length('{}')",
    "jsonb_array_length('3')",
    "'{\"a\": 1}'::jsonb::text",
    "1::jsonb",
    "'{\"a\": 1}'::jsonb = '{ \"a\" : 1 }'",
    "'2'::jsonb = '2.0'::jsonb",
    "'{\"a\": [1.0]}'::jsonb = '{\"a\": [1]}'::jsonb",
    "'true'::jsonb = '1'::jsonb",
    "'{\"a\": 1}'::jsonb <> '{\"a\": 2}'::jsonb",
    "'2'::jsonb < '10'::jsonb",
    # Aggregates over a constant row.
    "(SELECT count(*))",
    "(SELECT sum(x) FROM (VALUES (2147483647), (2147483647)) t(x))",
    "(SELECT count(x) FROM (VALUES ('a'), (NULL)) t(x))",
    "(SELECT avg(x) FROM (VALUES (1), (2)) t(x))",
    "(SELECT max(x) FROM (VALUES ('b'), ('a')) t(x))",
]

# Gaps that remain, each with why; a strict xfail, so a fix must remove it here.
KNOWN_GAPS: dict[str, str] = {
    "ARRAY[[1, 2], [3, 4]]": "arrays have one dimension in Loupe (0A000)",
    "'2'::jsonb < '10'::jsonb": "jsonb's own ordering is not implemented: refused (0A000)",
}


@pytest.fixture(scope="module")
def postgres(postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        yield connection


def postgres_answer(connection, expression: str):
    """(value, type) or ("error", SQLSTATE) from PostgreSQL."""
    try:
        row = connection.execute(f"SELECT {expression}, pg_typeof({expression})::text").fetchone()
    except psycopg.Error as error:
        return "error", error.sqlstate
    assert row is not None
    if row[1] == "interval":  # psycopg reads intervals as timedeltas: compare the text
        text = connection.execute(f"SELECT ({expression})::text").fetchone()
        assert text is not None
        return (None if text[0] is None else IntervalText(text[0])), "interval"
    return row[0], LOUPE_TYPES.get(row[1], row[1])


class IntervalText(str):
    """An interval as PostgreSQL prints it."""


def loupe_answer(expression: str):
    try:
        columns, rows = evaluate_constant(
            sqlglot.parse_one(f"SELECT {expression}", read=LoupeDialect)
        )
    except LoupeError as error:
        return "error", error.code
    return rows[0][0], columns[0][1]


def same_value(ours, theirs) -> bool:
    if isinstance(ours, Jsonb):  # what a client reads of a jsonb value
        ours = json.loads(ours)
    if ours is None or theirs is None:
        return ours is theirs
    if isinstance(theirs, bool) or isinstance(ours, bool):
        return ours is theirs
    if isinstance(theirs, Decimal):  # exact: a float that prints alike is not enough
        return isinstance(ours, Decimal) and ours == theirs
    if isinstance(theirs, float):
        return isinstance(ours, float) and (
            ours == theirs
            or math.isclose(ours, theirs)
            or (math.isnan(ours) and math.isnan(theirs))
        )
    if isinstance(theirs, IntervalText):
        return isinstance(ours, Interval) and str(ours) == theirs
    return type(ours) is type(theirs) and ours == theirs


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(e, marks=pytest.mark.xfail(reason=KNOWN_GAPS[e], strict=True))
        if e in KNOWN_GAPS
        else e
        for e in EXPRESSIONS
    ],
)
def test_constant_matches_postgres(postgres, expression):
    """The value and type PostgreSQL gives, or its SQLSTATE when it fails."""
    theirs = postgres_answer(postgres, expression)
    ours = loupe_answer(expression)
    if theirs[0] == "error" or ours[0] == "error":
        assert ours == theirs
        return
    assert ours[1] == theirs[1], f"type {ours[1]} where PostgreSQL says {theirs[1]}"
    assert same_value(ours[0], theirs[0]), f"{ours[0]!r} where PostgreSQL says {theirs[0]!r}"


_SPAN_ROWS = (
    "(VALUES (1, interval '1 mon'), (1, interval '30 days'), (2, interval '25 hours'), "
    "(2, interval '-1 day'), (1, NULL::interval), (3, interval '1 year 1 day'), "
    "(3, interval '720 hours'))"
)
_SPANS = f"{_SPAN_ROWS} AS t(g, x)"
QUERIES = [
    "SELECT generate_series(1, 3)",
    "SELECT generate_series(5, 1, -2) AS g",
    "SELECT x, x * x FROM generate_series(1, 4) AS t(x)",
    "SELECT g FROM generate_series(1, 3) g WHERE g <> 2",
    "SELECT 'k', generate_series(2147483646, 2147483647)",
    "SELECT generate_series(1, NULL::int)",
    "SELECT generate_series(1, 3, 0)",
    "SELECT count(*), sum(x), min(x), max(x) FROM generate_series(1, 1000) AS t(x)",
    "SELECT x % 3, count(*) FROM generate_series(1, 10) AS t(x) GROUP BY x % 3",
    "SELECT a.x, b.x FROM generate_series(1, 2) AS a(x), generate_series(1, 2) AS b(x)",
    "SELECT v FROM (VALUES (1), (NULL), (3)) AS t(v) WHERE NOT v IS NOT NULL",
    "SELECT v, count(v) FROM (VALUES ('a'), (NULL), ('a')) AS t(v) GROUP BY v",
    "SELECT x / 2, x % 2 FROM generate_series(-3, 3) AS t(x)",
    "SELECT row_number() OVER ()",
    "SELECT x, sum(x) OVER (ORDER BY x), rank() OVER (ORDER BY x) FROM (VALUES (1), (2), (2)) t(x)",
    "SELECT count(*) OVER (), ntile(2) OVER (ORDER BY x) FROM generate_series(1, 3) AS t(x)",
    # regexp_split_to_table: zero-length matches at either end or after a match do not split.
    "SELECT regexp_split_to_table('hello big  world', '\\s+')",
    "SELECT x FROM regexp_split_to_table(',a,,b,', ',') AS t(x)",
    "SELECT regexp_split_to_table('abc', '')",
    "SELECT regexp_split_to_table('a1b22c', '\\d*')",
    "SELECT regexp_split_to_table('abba', 'a|')",
    "SELECT regexp_split_to_table('abba', '(?=b)')",
    "SELECT regexp_split_to_table('aXbxc', 'x', 'i')",
    "SELECT regexp_split_to_table('', ',')",
    "SELECT regexp_split_to_table(NULL, ',')",
    "SELECT regexp_split_to_table('a,b', NULL)",
    "SELECT regexp_split_to_table('a', 'x', 'g')",
    "SELECT regexp_split_to_table('a', '(')",
    "SELECT regexp_split_to_table(1, ',')",
    "SELECT n, regexp_split_to_table(s, ' ') AS w "
    "FROM (VALUES (1, 'a b'), (2, NULL), (3, 'c')) AS t(n, s)",
    # string_agg: NULL values skipped, each later value after its own delimiter.
    "SELECT string_agg(s, ',' ORDER BY s) FROM (VALUES ('b'), ('a'), (NULL), ('a')) AS t(s)",
    "SELECT string_agg(s, d ORDER BY s DESC) FROM (VALUES ('b', '-'), ('a', NULL), ('c', '+')) "
    "AS t(s, d)",
    "SELECT g, string_agg(s, '' ORDER BY s) FROM (VALUES (1, 'x'), (2, 'y'), (1, 'w'), (2, NULL)) "
    "AS t(g, s) GROUP BY g",
    "SELECT string_agg(DISTINCT s, ',' ORDER BY s) FROM (VALUES ('b'), ('a'), ('b')) AS t(s)",
    "SELECT string_agg(s, ',' ORDER BY n, s) FILTER (WHERE n > 1) FROM "
    "(VALUES ('b', 1), ('a', 2), ('c', 3)) AS t(s, n)",
    "SELECT string_agg(s, ',') FROM (VALUES ('a')) AS t(s) WHERE false",
    "SELECT a, (SELECT string_agg(s, ',' ORDER BY s DESC) FROM (VALUES (1, 'x'), (1, 'y'), "
    "(2, 'z')) AS u(k, s) WHERE u.k = t.a) FROM (VALUES (1), (2), (3)) AS t(a)",
    "SELECT timestamp '2024-07-01 12:00' AT TIME ZONE 'UTC', to_char(timestamp '2024-07-01', 'Q')",
    "SELECT string_agg(n, ',') FROM (VALUES (1)) AS t(n)",
    # unnest in FROM and in the SELECT list: a row per element (none for NULL or empty).
    "SELECT * FROM unnest(ARRAY[1, NULL, 3]) AS u(x)",
    "SELECT x FROM unnest(ARRAY['a', 'b']) x",
    "SELECT unnest(ARRAY[1, 2]), 'k'",
    "SELECT n, unnest(a) FROM (VALUES (1, ARRAY[1, 2]), (2, '{}'::int[]), (3, NULL)) AS t(n, a)",
    "SELECT unnest(1)",
    "SELECT x, a[x] FROM (VALUES (ARRAY['p', 'q'])) AS t(a), generate_series(0, 3) AS g(x)",
    # array_agg: NULLs kept, ORDER BY, DISTINCT, FILTER; NULL over no rows.
    "SELECT array_agg(x ORDER BY x DESC), array_agg(DISTINCT x ORDER BY x), "
    "array_agg(x ORDER BY x) FILTER (WHERE x > 1) FROM (VALUES (1), (NULL), (3), (3)) AS t(x)",
    "SELECT g, array_agg(s ORDER BY s)::text FROM (VALUES (1, 'a b'), (1, NULL), (2, 'c')) "
    "AS t(g, s) GROUP BY g",
    "SELECT array_agg(x) FROM (VALUES (1)) AS t(x) WHERE false",
    "SELECT cardinality(array_agg(x)) FROM generate_series(1, 5) AS t(x)",
    # generate_series over numeric and over timestamps with an interval step.
    "SELECT generate_series(1.5, 3, 0.5)",
    "SELECT generate_series(1, 2.5)",
    "SELECT generate_series(3, 1, -0.5)",
    "SELECT generate_series(1, 2, 0.0)",
    "SELECT * FROM generate_series(timestamp '2024-01-01', timestamp '2024-01-02', "
    "interval '8 hours') AS g(t)",
    "SELECT generate_series(timestamptz '2024-01-01 01:00:00+00', "
    "timestamptz '2024-01-01 00:00:00+00', interval '-30 minutes')",
    "SELECT generate_series(timestamp '2024-01-01', timestamp '2024-01-02', interval '0 hours')",
    "SELECT generate_series(timestamp '2024-01-01', timestamp '2024-01-02')",
    "SELECT u, count(*) FROM (VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid), "
    "('A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid), (NULL), (md5('x')::uuid)) AS t(u) GROUP BY u",
    "SELECT max(u) FROM (VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid)) AS t(u)",
    "SELECT min(j) FROM (VALUES ('1'::jsonb)) AS t(j)",
    "SELECT a, count(*) FROM (VALUES (ARRAY[1, 2]), (ARRAY[1, 2]), (ARRAY[2])) AS t(a) GROUP BY a",
    "SELECT DISTINCT a FROM (VALUES (ARRAY['x', NULL]), (ARRAY['x', NULL])) AS t(a)",
    "SELECT count(DISTINCT j) FROM (VALUES ('{\"a\":1}'::jsonb), ('{ \"a\" : 1 }'::jsonb)) AS t(j)",
    "SELECT DISTINCT u FROM (VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid), "
    "('{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'::uuid)) AS t(u)",
    "SELECT string_agg(DISTINCT s, ',' ORDER BY n) FROM (VALUES ('a', 1)) AS t(s, n)",
    # Intervals: aggregates field by field, order and joins by total span.
    f"SELECT sum(x)::text, avg(x)::text, min(x)::text, max(x)::text, count(x) FROM {_SPANS}",
    f"SELECT g, sum(x)::text, avg(x)::text, min(x)::text, max(x)::text FROM {_SPANS} GROUP BY g",
    f"SELECT x::text AS t FROM {_SPANS} ORDER BY x DESC NULLS LAST, t LIMIT 3",
    f"SELECT g, x::text AS t FROM {_SPANS} WHERE x >= INTERVAL '30 days' ORDER BY x, t",
    f"SELECT a.x::text, b.x::text FROM {_SPAN_ROWS} a(g, x) JOIN {_SPAN_ROWS} b(g, x) "
    "ON a.x = b.x AND a.g <> b.g",
    # Groups and DISTINCT by total span ('1 mon', '30 days' and '720 hours' are one).
    f"SELECT count(*), sum(g) FROM {_SPANS} GROUP BY x",
    f"SELECT count(DISTINCT x), count(x) FROM {_SPANS}",
    f"SELECT g, count(DISTINCT x) FROM {_SPANS} GROUP BY g",
    f"SELECT count(*) FROM (SELECT DISTINCT x FROM {_SPANS}) AS d",
    f"SELECT count(*) FROM (SELECT x FROM {_SPANS} UNION SELECT interval '24:00:00') AS u",
    f"SELECT count(*) FROM {_SPANS} GROUP BY x HAVING x > interval '1 day'",
    # Peers by span: '1 mon' and '30 days' rank alike and share a RANGE frame.
    f"SELECT g, rank() OVER (ORDER BY x) AS r, count(*) OVER (ORDER BY x) AS c FROM {_SPANS}",
    # Window aggregates of intervals (each frame's rows read: field by field, min/max by span).
    "SELECT g, (sum(x) OVER (ORDER BY g, x))::text AS s, (min(x) OVER (PARTITION BY g))::text "
    "AS lo, (avg(x) OVER (ORDER BY g, x ROWS BETWEEN 1 PRECEDING AND CURRENT ROW))::text AS a, "
    "(max(x) OVER ())::text AS hi FROM (VALUES (1, interval '1 mon'), (1, interval '25 hours'), "
    "(2, interval '-1 day'), (3, NULL::interval)) AS t(g, x)",
]


def postgres_rows(connection, sql: str):
    try:
        cursor = connection.execute(sql)
    except psycopg.Error as error:
        return "error", error.sqlstate, None
    names = [c.name for c in cursor.description]
    return "ok", names, cursor.fetchall()


def loupe_rows(sql: str):
    try:
        columns, rows = evaluate_constant(sqlglot.parse_one(sql, read=LoupeDialect))
    except LoupeError as error:
        return "error", error.code, None
    return "ok", [name for name, _ in columns], rows


def _sortable(row):
    return tuple((value is None, str(value)) for value in row)


@pytest.mark.parametrize("sql", QUERIES)
def test_query_matches_postgres(postgres, sql):
    """Rows (as a multiset), column names, or the SQLSTATE, as PostgreSQL answers."""
    theirs = postgres_rows(postgres, sql)
    ours = loupe_rows(sql)
    if theirs[0] == "error" or ours[0] == "error":
        assert ours[:2] == theirs[:2]
        return
    assert ours[1] == theirs[1]
    assert sorted(ours[2], key=_sortable) == sorted(theirs[2], key=_sortable)


# numeric quotients: Loupe rounds to its 16 decimals, PostgreSQL to a scale it picks per
# value (at least 16 significant digits): they agree at the smaller of the two scales.
QUOTIENTS = [
    "1 / 3.0",
    "2 / 3.0",
    "10 / 3.0",
    "-1.0 / 7",
    "1000000 / 7.0",
    "(SELECT avg(x) FROM (VALUES (1), (1), (2)) t(x))",
    "(SELECT avg(x) FROM (VALUES (0.1), (0.25), (1)) t(x))",
]


@pytest.mark.parametrize("expression", QUOTIENTS)
def test_numeric_quotients_agree_with_postgresql_at_the_smaller_scale(postgres, expression):
    """Same type; the values agree rounded (half away from zero) to the smaller scale."""
    theirs = postgres_answer(postgres, expression)
    ours = loupe_answer(expression)
    assert ours[1] == theirs[1] == "numeric"
    assert isinstance(ours[0], Decimal)
    exponent = theirs[0].as_tuple().exponent
    assert isinstance(exponent, int)
    quantum = Decimal(1).scaleb(max(exponent, -16))
    assert ours[0].quantize(quantum, rounding=ROUND_HALF_UP) == theirs[0].quantize(
        quantum, rounding=ROUND_HALF_UP
    )


@pytest.mark.parametrize(
    ("expression", "text"),
    [
        ("1.50::numeric", "1.5"),
        ("100.00::numeric", "100"),
        ("0.000::numeric", "0"),
        ("-0.0100", "-0.01"),
        ("1e-7::numeric", "0.0000001"),
        ("2.5 * 4", "10"),
    ],
)
def test_numeric_text_trims_trailing_zeros_as_materialize(postgres, expression, text):
    """``::text`` drops trailing zeros (Materialize); the number is PostgreSQL's."""
    ours = loupe_answer(f"({expression})::text")
    assert ours == (text, "text")
    theirs = postgres_answer(postgres, f"({expression})::text")
    assert Decimal(theirs[0]) == Decimal(text)
