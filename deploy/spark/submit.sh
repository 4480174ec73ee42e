#!/usr/bin/env bash
# spark-submit with the project's venv: its python for the driver and the
# workers, the project on PYTHONPATH, Java 17 when JAVA_HOME is unset, and the
# driver's class-sharing archive (client/spark/cds.py) when one is in place and
# no driver Java options are given.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${VENV:-$here/.venv}"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$venv/bin/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PYSPARK_PYTHON}"
if [ -z "${JAVA_HOME:-}" ] && [ -d /usr/lib/jvm/java-17-openjdk-amd64 ]; then
    export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
case " $* " in
    *" --driver-java-options"*|*spark.driver.extraJavaOptions*) cds="" ;;
    *) cds="$("$PYSPARK_DRIVER_PYTHON" -m client.spark.cds options 2>/dev/null || true)" ;;
esac
if [ -n "$cds" ]; then
    set -- --driver-java-options "$cds" "$@"
fi
exec "$venv/bin/spark-submit" "$@"
