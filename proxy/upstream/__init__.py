# Strategy: the proxy's own ways to the upstream cluster. Every upstream connection is opened
# by a Dialer (TLS and SASL come from proxy/security/secure_upstream.py, beside this package); the
# proxy's own requests share BrokerChannels. Client connections forward on upstream
# connections of their own (proxy/connection/upstream_link.py). The package re-exports nothing.
"""The proxy's upstream side: dialing, shared broker channels, cluster metadata.

dialer.py          the Dialer protocol and the real one: TCP, TLS and SASL to a broker
broker_channel.py  a multiplexed, reconnecting connection for the proxy's own requests
metadata.py        the proxy's own requests to the cluster, and the metadata refresher
"""
