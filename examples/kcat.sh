#!/usr/bin/env bash
# kcat through purgatory-proxy: metadata, produce (acks=all), read back, consume in a group.
#
#   examples/kcat.sh [BOOTSTRAP] [COUNT]        defaults: 127.0.0.1:9092 (make run), 5
#
# Each step is one kcat command, printed before it runs, so the one-liners can be copied.
# kcat has no admin API: the topic (fresh per run) is created by the broker's auto-create on
# first produce (on by default in Apache Kafka and the embedded Tansu broker). Debian's kcat
# works through the proxy as it is. Set KCAT to use another binary and SESSION_TIMEOUT_MS for
# the group step (Apache Kafka accepts 6000 and up; the embedded broker is quicker with less).
set -euo pipefail

bootstrap=${1:-127.0.0.1:9092}
count=${2:-5}
kcat=${KCAT:-kcat}
session_timeout_ms=${SESSION_TIMEOUT_MS:-6000}
run=$(date +%s)-$$
topic=examples-kcat-$run
group=examples-kcat-$run

step() { echo "+ $*" >&2; "$@"; }

echo "kcat $("$kcat" -V 2>&1 | grep -o 'librdkafka [^ ]*' | head -1), bootstrap $bootstrap"

# 1. Metadata: the brokers listed are the proxy's per-broker ports, not the real brokers.
step "$kcat" -L -b "$bootstrap" -m 5 -t "$topic" | sed -n '1,/topics:/p'

# 2. Produce COUNT "key:value" lines with acks=all; -vv reports each delivery on stderr.
echo "+ $kcat -P -b $bootstrap -t $topic -K : -X acks=all -vv" >&2
seq 1 "$count" | sed "s/.*/key-&:$run record &/" \
  | "$kcat" -P -b "$bootstrap" -t "$topic" -K : -X acks=all -X message.timeout.ms=30000 -vv \
      2>&1 | sed -n 's/.*Message delivered to partition \(-\?[0-9]*\) (offset \(-\?[0-9]*\)).*/produced partition=\1 offset=\2/p'

# 3. Read everything back from the beginning without a group and exit at the end.
step "$kcat" -C -b "$bootstrap" -t "$topic" -o beginning -e -q \
  -f 'read partition=%p offset=%o key=%k value=%s\n'

# 4. The same records through a consumer group; offsets are committed when kcat closes.
consumed=$(step "$kcat" -G "$group" -b "$bootstrap" -c "$count" -q \
  -X auto.offset.reset=earliest \
  -X session.timeout.ms="$session_timeout_ms" \
  -X heartbeat.interval.ms=$((session_timeout_ms / 4)) \
  -f 'consumed partition=%p offset=%o key=%k value=%s\n' "$topic")
echo "$consumed"

got=$(grep -c "value=$run record" <<<"$consumed" || true)
echo "kcat via $bootstrap: produced $count to $topic, consumed $got in group $group"
[ "$got" -eq "$count" ]
