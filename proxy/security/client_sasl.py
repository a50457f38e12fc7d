# Strategy: with client_auth = "none" the proxy takes no SASL from its clients (it speaks to the
# cluster with its own identity). A client configured for SASL must then get a clear Kafka
# answer rather than a hang or a silent forward that would authenticate it as nobody:
#
#   - ApiVersions responses do not advertise SaslHandshake or SaslAuthenticate;
#   - SaslHandshake is answered UNSUPPORTED_SASL_MECHANISM with no mechanisms enabled (what a
#     Kafka broker answers for a mechanism it does not offer; clients report it and stop);
#   - SaslAuthenticate (necessarily before any successful SaslHandshake) closes the connection
#     with one log line, as a Kafka broker does (IllegalSaslStateException).
#
# With client_auth = "passthrough" the client's SASL requests are forwarded on its own upstream
# connection instead (proxy/connection/client_auth.py tracks what the cluster confirmed); only
# SaslHandshake v0 is refused there (ClientSaslV0): after it, Kafka expects SASL tokens without
# Kafka framing, which a proxy that reads frames cannot pass on.
"""Client SASL the proxy refuses: all of it with client_auth none, v0 handshakes in passthrough."""

from __future__ import annotations

from wire.apis import ApiKey, response_header_version
from wire.codec import encode
from wire.errors import RemoteProtocolError
from wire.headers import RequestHeader, ResponseHeader, encode_response_header
from wire.messages import SaslHandshakeResponse

__all__ = ["CLIENT_SASL_APIS", "ClientSaslV0", "IllegalSaslState", "refuse_client_sasl"]

#: The APIs a client authenticates with; never forwarded, never advertised in mode "none".
CLIENT_SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34


class IllegalSaslState(RemoteProtocolError):
    """A client sent SaslAuthenticate without a successful SaslHandshake first."""


class ClientSaslV0(RemoteProtocolError):
    """A SaslHandshake v0 in passthrough: the unframed tokens after it cannot be relayed."""


def refuse_client_sasl(header: RequestHeader) -> bytes:
    """The whole response frame (size included) refusing a client's SaslHandshake.

    ``header`` must be a SaslHandshake or SaslAuthenticate request header of a version the
    codec knows (rewrite.plan_request checks that first).

    Raises:
        IllegalSaslState: for SaslAuthenticate; the connection is closed.
    """
    api_key, version = header.api_key, header.api_version
    if api_key != ApiKey.SASL_HANDSHAKE:
        raise IllegalSaslState(
            "SaslAuthenticate before SaslHandshake (client_auth = none: the proxy takes no "
            "client SASL and authenticates to the cluster itself)",
            error_code=ILLEGAL_SASL_STATE,
        )
    body = encode(
        SaslHandshakeResponse(error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=[]), version
    )
    head = encode_response_header(
        ResponseHeader(header.correlation_id), response_header_version(api_key, version)
    )
    return (len(head) + len(body)).to_bytes(4, "big") + head + body
