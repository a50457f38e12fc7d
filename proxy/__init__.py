# Strategy: one folder per subsystem (docs/architecture.md); the root holds what wires them.
"""purgatory-proxy: a Kafka-compatible sidecar with its own purgatory and one bytes limit.

__main__.py     `python -m proxy`: the command line
cli.py          the command line: run, dev-broker, report
config/         the one pydantic model of every setting
server.py       serve(): wires the collaborators, owns the nursery tree and shutdown
reload.py       SIGHUP: the TLS files re-read
errors.py       the proxy's typed errors, one tree
address.py      Address: a host and a port, the value every subsystem passes
connection/     client connections: listeners, the sans-I/O state, the pumps
held/           held fetches and produces: the purgatory's users
upstream/       the proxy's own way upstream: dialing, broker channels, metadata
routing/        what clients are told: broker addresses, topic ids, rewrites
security/       TLS and SASL, toward clients and toward the cluster
observability/  metrics, the request log, health and readiness, logs
primitives/     timer, purgatory, memory pool, framing: trio building blocks
broker/         the embedded broker and the keeper that ties its life to ours
"""
