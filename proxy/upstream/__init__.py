# Strategy: the proxy's own ways to the upstream cluster. Every upstream connection is opened
# by a Dialer (dialer.py; TLS and SASL come from proxy/secure_upstream.py, beside this
# package); the proxy's own requests share BrokerChannels (broker_channel.py); metadata.py
# learns the cluster's brokers. Client connections forward on upstream connections of their
# own (proxy/connection/client.py). The package re-exports nothing.
"""The proxy's upstream side: dialing, shared broker channels, cluster metadata."""
