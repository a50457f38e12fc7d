#!/usr/bin/env bash
# Compile and run ProxyExample.java against the kafka-clients jar.
#
#   examples/java/run.sh [--bootstrap HOST:PORT] [--count N] [--session-timeout-ms MS] ...
#
# Every argument goes to ProxyExample; its header lists the flags (TLS and SASL included).
#
# The jars: set KAFKA_CLIENTS_CLASSPATH to your own kafka-clients and its runtime jars, or let
# classpath.sh resolve them from Maven Central (pom.xml here pins kafka-clients; Maven needed
# once). The client logs warnings and errors to stderr (slf4j-simple).
# Needs a JDK 17 (javac, java); scripts/install-system-deps.sh installs one and Maven on Debian.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
classpath=${KAFKA_CLIENTS_CLASSPATH:-$("$here/classpath.sh")}

# Classes are kept per classpath, so a new kafka-clients recompiles the example.
build=${TMPDIR:-/tmp}/purgatory-proxy-examples-java-$(id -u)-$(printf %s "$classpath" | sha256sum | cut -c1-12)
mkdir -p "$build"
if [ ! "$build/ProxyExample.class" -nt "$here/ProxyExample.java" ]; then
  echo "+ javac -cp <kafka-clients> -d $build ProxyExample.java" >&2
  javac -cp "$classpath" -d "$build" "$here/ProxyExample.java"
fi
echo "+ java -cp $build:<kafka-clients> ProxyExample $*" >&2
exec java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
  -cp "$build:$classpath" ProxyExample "$@"
