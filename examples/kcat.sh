#!/usr/bin/env bash
# kcat through purgatory-proxy: metadata, produce (acks=all), read back, consume in a group.
#
#   examples/kcat.sh [BOOTSTRAP] [COUNT] [KCAT OPTION ...]    defaults: 127.0.0.1:9092, 5
#
# Options after COUNT go to every kcat command: -X PROPERTY=VALUE (librdkafka's properties)
# or -F FILE (a file of them). TLS and SASL, for a proxy listener that needs them:
#
#   examples/kcat.sh proxy.example:9093 5 -X security.protocol=sasl_ssl \
#     -X ssl.ca.location=ca.pem -X sasl.mechanisms=SCRAM-SHA-512 \
#     -X sasl.username=alice -X sasl.password=secret
#
# (mutual TLS: -X ssl.certificate.location=client.pem -X ssl.key.location=client.key; no
# hostname check: -X ssl.endpoint.identification.algorithm=none).
#
# Each step is one kcat command, printed before it runs (a sasl.password masked), so the
# one-liners can be copied. kcat has no admin API: the topic (fresh per run) is created by
# the broker's auto-create on first produce (on by default in Apache Kafka and the embedded
# Tansu broker), or exists already. Debian's kcat works through the proxy as it is.
# Environment: KCAT (the binary), SESSION_TIMEOUT_MS for the group step (Apache Kafka accepts
# 6000 and up; the embedded broker is quicker with less), TOPIC and GROUP (default: fresh
# names), KEYS (distinct keys; default one per record), RUN (prefix of every value).
# Record i (from 0) is key "key-<i % KEYS>", value "<RUN> record <i>". tests/compat runs this
# script as its kcat client and checks every line it prints against the broker.
set -euo pipefail

bootstrap=${1:-127.0.0.1:9092}
count=${2:-5}
shift $(($# < 2 ? $# : 2))
kcat=${KCAT:-kcat}
session_timeout_ms=${SESSION_TIMEOUT_MS:-6000}
run=${RUN:-$(date +%s)-$$}
topic=${TOPIC:-examples-kcat-$run}
group=${GROUP:-examples-kcat-$run}
keys=${KEYS:-$count}

step() { echo "+ $*" | sed 's/sasl\.password=[^ ]*/sasl.password=***/g' >&2; "$@"; }

echo "kcat $("$kcat" -V 2>&1 | grep -o 'librdkafka [^ ]*' | head -1), bootstrap $bootstrap"

# 1. Metadata: the brokers listed are the proxy's per-broker ports, not the real brokers.
step "$kcat" -L -b "$bootstrap" "$@" -m 5 -t "$topic" | sed -n '1,/topics:/p'

# 2. Produce COUNT "key:value" lines with acks=all, idempotent; -vv reports each delivery
#    on stderr, turned into a "produced" line on stdout here (kcat names the slot, not the
#    record). Its other lines stay on stderr, picked before the rewrite, which would make a
#    delivery line one of them (printed twice).
seq 0 $((count - 1)) | awk -v keys="$keys" -v run="$run" '{ printf "key-%d:%s record %d\n", $1 % keys, run, $1 }' \
  | step "$kcat" -P -b "$bootstrap" "$@" -t "$topic" -K : -X acks=all -X enable.idempotence=true \
      -X message.timeout.ms=30000 -vv 2>&1 \
  | sed -n -e '/Message delivered/!w /dev/stderr' \
      -e 's/.*Message delivered to partition \(-\?[0-9]*\) (offset \(-\?[0-9]*\)).*/produced partition=\1 offset=\2/p'

# 3. Read everything back from the beginning without a group and exit at the end.
step "$kcat" -C -b "$bootstrap" "$@" -t "$topic" -o beginning -e -q \
  -f 'read partition=%p offset=%o key=%k value=%s\n'

# 4. The same records through a consumer group; offsets are committed when kcat closes.
consumed=$(step "$kcat" -G "$group" -b "$bootstrap" "$@" -c "$count" -q \
  -X auto.offset.reset=earliest \
  -X session.timeout.ms="$session_timeout_ms" \
  -X heartbeat.interval.ms=$((session_timeout_ms / 4)) \
  -f 'consumed partition=%p offset=%o key=%k value=%s\n' "$topic")
echo "$consumed"

got=$(grep -c "value=$run record " <<<"$consumed" || true)
echo "kcat via $bootstrap: produced $count to $topic, consumed $got in group $group"
[ "$got" -eq "$count" ]
