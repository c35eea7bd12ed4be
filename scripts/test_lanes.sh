#!/usr/bin/env bash
# `make test`'s pytest run, in two lanes at once, one per core of a CI machine:
# - the end-to-end stories (tests/, but for those below): each starts a whole
#   system of processes (`loupe up`) that mostly waits on itself — for Spark, a
#   replica's restart, a retention window — so one story at a time, in order;
# - everything else: unit and service tests (libs/, services/), the
#   PostgreSQL-differential tests, the introspection views' tests and the
#   sqllogictest sample.
# The stories lane prints when it is done, after the other. Then the chaos
# story runs alone: it holds Loupe to a recovery bound after every kill, and a
# second lane's CPU load (the whole differential suite) is not a fault it injects.
# The exit code is non-zero if anything failed. With arguments, one plain pytest
# run of them.
set -uo pipefail

pytest="$1"
shift
if [ $# -gt 0 ]; then
  exec "$pytest" "$@"
fi

stories_log=$(mktemp -t loupe-stories-XXXXXX.log)
"$pytest" tests --ignore=tests/differential --ignore=tests/introspection \
  --ignore=tests/test_sqllogictest.py --ignore=tests/test_chaos.py \
  -p no:cacheprovider >"$stories_log" 2>&1 &
stories=$!
trap 'kill "$stories" 2>/dev/null; rm -f "$stories_log"; exit 130' INT TERM

echo "== lane 1: unit, service, differential and sqllogictest tests (the stories run beside it)"
"$pytest" libs services tests/differential tests/introspection tests/test_sqllogictest.py
parts_status=$?

wait "$stories"
stories_status=$?
echo
echo "== lane 2: the end-to-end stories"
cat "$stories_log"
rm -f "$stories_log"

echo
echo "== then alone: the chaos story"
"$pytest" tests/test_chaos.py -p no:cacheprovider
chaos_status=$?
echo
echo "== lanes: parts exit $parts_status, stories exit $stories_status, chaos exit $chaos_status"
[ "$parts_status" -eq 0 ] && [ "$stories_status" -eq 0 ] && [ "$chaos_status" -eq 0 ]
