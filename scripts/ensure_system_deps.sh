#!/usr/bin/env bash
# What Loupe needs from the system, installed when missing and we may (root
# with apt-get); otherwise we say what to do.
# - Java 17+ for Spark (PySpark 4.x), and a JDK's javac to build Loupe's local
#   file system for Spark (without it Spark forks a chmod per file it writes).
# - PostgreSQL's server binaries, so the tests of the stash-postgres catalog
#   can start a temporary cluster when no server runs locally.
# - psql and PostgreSQL's JDBC driver (pgjdbc), the real clients the pgwire
#   tests connect with.
# - Debian's Chromium and ChromeDriver: the console's tests drive a real
#   browser with Playwright (never a browser download of Playwright's own).
set -euo pipefail

missing=()
java_ok=0
if command -v java >/dev/null 2>&1; then
  version=$(java -version 2>&1 | awk -F'"' '/version/ {print $2}' | cut -d. -f1)
  [ "${version:-0}" -ge 17 ] && java_ok=1
fi
[ "$java_ok" = 1 ] || missing+=(openjdk-17-jre-headless)
if ! command -v javac >/dev/null 2>&1 && ! [ -x "${JAVA_HOME:-/nonexistent}/bin/javac" ]; then
  missing+=(openjdk-17-jdk-headless)
fi
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} (apt-get) ..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  exit 0
fi
echo "Loupe needs: ${missing[*]} (Java 17+ for Spark, a JDK to speed its writes up; PostgreSQL, psql, pgjdbc and Chromium for tests)." >&2
if [[ " ${missing[*]} " == *" openjdk-17-jre-headless "* ]]; then exit 1; fi
echo "continuing without them: the tests that need them will be skipped" >&2
