#!/usr/bin/env bash
# Spark (PySpark 4.x) needs Java 17 or newer. Install it from the distribution
# when it is missing and we may (root with apt-get); otherwise say what to do.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
  version=$(java -version 2>&1 | awk -F'"' '/version/ {print $2}' | cut -d. -f1)
  if [ "${version:-0}" -ge 17 ]; then exit 0; fi
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Java 17 for Spark (apt-get) ..."
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  exit 0
fi
echo "Spark needs Java 17+: install a JDK (e.g. openjdk-17-jre-headless) and retry" >&2
exit 1
