#!/usr/bin/env bash
# Print the Java client's classpath (kafka-clients and its runtime jars, pom.xml next to this
# script), resolving it from Maven Central the first time. The answer is kept per pom.xml
# contents under ${XDG_CACHE_HOME:-~/.cache}/purgatory-proxy/java, so later calls cost no JVM.
#
#   examples/java/classpath.sh          # -> /root/.m2/.../kafka-clients-4.4.0.jar:...
#
# Needs Maven (mvn) on the first call; run.sh and tests/compat/_java.py call this.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
pom="$here/pom.xml"
cache="${PURGATORY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/purgatory-proxy}/java"
key=$(sha256sum "$pom" | cut -c1-16)
answer="$cache/classpath-$key.txt"

if [ ! -s "$answer" ]; then
  command -v mvn >/dev/null 2>&1 || { echo "classpath.sh: Maven (mvn) is not on PATH" >&2; exit 1; }
  mkdir -p "$cache"
  staging=$(mktemp "$cache/.classpath-XXXXXX")
  echo "+ mvn dependency:build-classpath -f $pom" >&2
  # Maven 3.8 writes colour resets even with -B and style.color=never: they are removed here,
  # with the lines they leave empty, so a terminal or a log gets Maven's words only.
  mvn -q -B -Dstyle.color=never -f "$pom" dependency:build-classpath -Dmdep.includeScope=runtime \
    -Dmdep.outputFile="$staging" 2>&1 | sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e '/^[[:space:]]*$/d' >&2
  mv "$staging" "$answer"
fi
cat "$answer"
