# Strategy: everything that proves who is talking; the settings' models are in security_config.
"""Security: TLS toward clients and the cluster, SASL toward the cluster and from clients.

tls.py              ServerTls (listeners, mutual TLS, CRL) and UpstreamTls, reloadable
server_names.py     SNI mode's names: the host told for each broker, the broker a name is
sni.py              SNI mode's handshake: the hello's server name routed, or refused
secure_upstream.py  open_upstream: TCP, TLS and SASL to a broker, one call
secured_stream.py   SecuredStream: an upstream stream that re-authenticates between requests
sasl_client.py      the proxy's own SASL client: PLAIN, SCRAM, OAUTHBEARER
client_sasl.py      client_auth = none: a client's SASL requests refused
security_config.py  the [proxy.tls], [upstream.tls] and [upstream.sasl] models
"""
