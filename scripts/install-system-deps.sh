#!/usr/bin/env bash
# Install the Debian packages the client compatibility matrix needs (tests/compat/):
#   kcat                       the kcat client (run on the confluent-kafka wheel's librdkafka)
#   openjdk-17-jdk-headless    javac + java for the Java client (tests/compat/_java.py)
#   maven                      resolves kafka-clients for the Java client (examples/java/pom.xml)
#                              and the broker (testbed/kafka/pom.xml) from Maven Central
#   prometheus                 prometheus and promtool: tests/deploy/test_prometheus.py scrapes a
#                              running proxy and evaluates the Grafana dashboard's queries and
#                              deploy/prometheus/alerts.yml (its own server on a free loopback
#                              port; the packaged service is not used and is stopped here)
#   iproute2                   ss: tests/reliability/kafka_system/test_proxy_faults.py resets the
#                              proxy's connections to the brokers with `ss -K` (as root)
#
# Go is not a Debian package here: the Go clients (franz-go, sarama, kafka-go) are built from
# the Go module proxy at test time (tests/compat/go, tests/compat/_go.py) and need the Go of
# their go.mod (1.26), newer than Debian 12's golang-go. The machines have it on PATH; this
# script checks it and says so when it is missing or too old.
#
# Idempotent and fast: when every tool is on PATH it does nothing (no apt-get update).
# Works as root on a fresh Debian 12 with only apt-get; as another user it uses sudo if present.
# The Python side (confluent-kafka, aiokafka, kafka-python, ...) comes from pip.
set -euo pipefail

# tool on PATH -> Debian package that provides it
declare -A PACKAGE_FOR=(
  [kcat]=kcat
  [javac]=openjdk-17-jdk-headless
  [java]=openjdk-17-jdk-headless
  [mvn]=maven
  [prometheus]=prometheus
  [promtool]=prometheus
  [ss]=iproute2
)
# The Go the modules in tests/compat/go need (their go.mod's go line).
GO_NEEDED=1.26

check_go() {
  if ! command -v go >/dev/null 2>&1; then
    echo "install-system-deps: go not found: the Go clients need Go >= $GO_NEEDED on PATH" >&2
    return 1
  fi
  local have
  have=$(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')
  if [ "$(printf '%s\n%s\n' "$GO_NEEDED" "$have" | sort -V | head -n1)" != "$GO_NEEDED" ]; then
    echo "install-system-deps: go $have is older than the $GO_NEEDED the Go clients need" >&2
    return 1
  fi
}

missing=()
for tool in "${!PACKAGE_FOR[@]}"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    missing+=("${PACKAGE_FOR[$tool]}")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  check_go
  echo "install-system-deps: kcat, java, javac, mvn, prometheus, ss and go $GO_NEEDED+ already installed"
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
# Debian's prometheus package enables and starts its own server on :9090 where systemd runs;
# the tests start theirs, so a service this script brought in is stopped again.
if [[ " ${packages[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
  "${as_root[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi

for tool in "${!PACKAGE_FOR[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "install-system-deps: $tool still missing after installing ${packages[*]}" >&2
    exit 1
  }
done
check_go
echo "install-system-deps: done"
