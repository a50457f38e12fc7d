# Strategy: the API table is data generated from the schema JSON (wire/_api_table.py);
# this module gives it a typed face and answers the two questions the proxy asks per
# request: "which header version does (api key, version) use?" and "can we decode this
# body?". Nothing here is hand-maintained per API except the one special case Kafka's own
# generator hard-codes (ApiVersions responses always use header v0).
"""Every API key the schema tables know: names, version ranges, flexible versions."""

from __future__ import annotations

from dataclasses import dataclass

from wire._api_table import API_ROWS, ApiKey
from wire.errors import UnknownApiKey, UnsupportedVersion
from wire.messages import REQUESTS

__all__ = [
    "APIS",
    "API_BY_KEY",
    "ApiKey",
    "ApiSpec",
    "api_spec",
    "can_decode",
    "request_header_version",
    "response_header_version",
]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API key as the schema tables describe it.

    Attributes:
        api_key: the key.
        name: the schema name without Request/Response, e.g. ``"Fetch"``.
        min_version: the oldest version in the schema (Kafka 4 dropped older ones).
        max_version: the newest version in the schema.
        first_flexible_version: the first version with compact encodings and tagged
            fields (and request header v2 / response header v1), or None.
        latest_version_unstable: whether ``max_version`` is still under development.
        listeners: the listener types that serve it (``"broker"``, ``"controller"``).
        decodable: whether :mod:`wire.codec` decodes its bodies (any schema version).
    """

    api_key: int
    name: str
    min_version: int
    max_version: int
    first_flexible_version: int | None
    latest_version_unstable: bool
    listeners: tuple[str, ...]
    decodable: bool

    def is_flexible(self, version: int) -> bool:
        """Whether ``version`` uses the flexible encoding. True for every version from
        the first flexible one on, including versions newer than the table knows.
        """
        first = self.first_flexible_version
        return first is not None and version >= first


_DECODABLE = frozenset(c.API_KEY for c in REQUESTS)

#: Every API in the schema tables, by key order.
APIS: tuple[ApiSpec, ...] = tuple(ApiSpec(*row, decodable=row[0] in _DECODABLE) for row in API_ROWS)
#: The same, by api key.
API_BY_KEY: dict[int, ApiSpec] = {a.api_key: a for a in APIS}


def api_spec(api_key: int) -> ApiSpec:
    """The table entry of ``api_key``.

    Raises:
        UnknownApiKey: the key is not in the schema tables.
    """
    spec = API_BY_KEY.get(api_key)
    if spec is None:
        raise UnknownApiKey(f"unknown API key {api_key}")
    return spec


def can_decode(api_key: int, version: int) -> bool:
    """Whether :mod:`wire.codec` can decode request and response bodies of this API version."""
    spec = API_BY_KEY.get(api_key)
    return spec is not None and spec.decodable and spec.min_version <= version <= spec.max_version


def _spec_for_version(api_key: int, api_version: int) -> ApiSpec:
    """The table entry of ``api_key``, refusing a negative version."""
    spec = api_spec(api_key)
    if api_version < 0:
        raise UnsupportedVersion(f"{spec.name} version {api_version} is negative")
    return spec


def request_header_version(api_key: int, api_version: int) -> int:
    """The request header version of (api key, version): 2 if flexible, else 1.

    Kafka 4 removed header v0 (only ControlledShutdown v0 used it, and that API is no
    longer in the tables).

    Raises:
        UnknownApiKey: the key is not in the schema tables.
        UnsupportedVersion: ``api_version`` is negative.
    """
    spec = _spec_for_version(api_key, api_version)
    return 2 if spec.is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """The response header version of (api key, version): 1 if flexible, else 0.

    ApiVersions responses always use header v0, even in flexible versions: the client
    must read the response before it knows which versions the broker supports (KIP-511;
    Kafka's ApiMessageTypeGenerator special-cases this, and ApiVersionsResponse.json says
    "Tagged fields are only supported in the body but not in the header").

    Raises:
        UnknownApiKey: the key is not in the schema tables.
        UnsupportedVersion: ``api_version`` is negative.
    """
    spec = _spec_for_version(api_key, api_version)
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if spec.is_flexible(api_version) else 0
