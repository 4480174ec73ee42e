#!/usr/bin/env bash
# spark-submit with the project's venv: its python for the driver and the
# workers, the project on PYTHONPATH, and Java 17 when JAVA_HOME is unset.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${VENV:-$here/.venv}"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$venv/bin/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PYSPARK_PYTHON}"
if [ -z "${JAVA_HOME:-}" ] && [ -d /usr/lib/jvm/java-17-openjdk-amd64 ]; then
    export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$venv/bin/spark-submit" "$@"
