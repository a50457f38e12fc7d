"""purgatory-proxy: a Kafka-compatible sidecar with its own purgatory and one bytes limit."""
