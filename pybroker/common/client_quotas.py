"""Client quota vocabulary shared by the broker and the tools: Kafka's entity types, the default
entity's name, and the quota keys with their value types (QuotaConfigs' user and client-id keys, and
KIP-612's connection_creation_rate, the one key of an ``ip`` entity)."""

from __future__ import annotations

import ipaddress

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
#: The stored name of a default entity (ZooKeeper's ``<default>`` node; null in the protocol).
DEFAULT = "<default>"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
#: key -> "long" or "double", as Kafka defines them (user and client-id entities)
QUOTA_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long", REQUEST_PERCENTAGE: "double",
              CONTROLLER_MUTATION_RATE: "double"}
#: the keys of an ip entity (DynamicConfig.Ip): new connections per second from one address
IP_QUOTA_KEYS = {CONNECTION_CREATION_RATE: "int"}
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
_LIMITS = {"long": (LONG_MAX, "a LONG"), "int": (INT_MAX, "an INT")}


def validate_quota_value(key: str, value: float, keys: dict[str, str] = QUOTA_KEYS) -> str | None:
    """Kafka's ClientQuotaControlManager.validateQuotaKeyValue for an entity whose keys are ``keys``:
    the INVALID_REQUEST message, or None."""
    kind = keys.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if kind in _LIMITS:
        limit, name = _LIMITS[kind]
        if value > limit:
            return f"Proposed value for {key} is too large for {name}."
        if abs(value % 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


def format_value(key: str, value: float) -> str:
    """The stored text of a quota value: whole numbers without a fraction, as Kafka's ZooKeeper JSON has them."""
    return str(int(round(value))) if {**QUOTA_KEYS, **IP_QUOTA_KEYS}.get(key) in _LIMITS else repr(float(value))


def normalized_ip(address: str) -> str | None:
    """An address in its one stored spelling (an IPv4-mapped IPv6 address as IPv4, no zone), or None
    when it is not an IP address: ip entities are named so, and connections matched so."""
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)
