"""Client quota vocabulary shared by the broker and the tools: Kafka's entity types, the default
entity's name, and the quota keys with their value types (QuotaConfigs' user and client-id keys)."""

from __future__ import annotations

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
#: The stored name of a default entity (ZooKeeper's ``<default>`` node; null in the protocol).
DEFAULT = "<default>"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: key -> "long" or "double", as Kafka defines them
QUOTA_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long", REQUEST_PERCENTAGE: "double",
              CONTROLLER_MUTATION_RATE: "double"}
LONG_MAX = 2**63 - 1


def validate_quota_value(key: str, value: float) -> str | None:
    """Kafka's ClientQuotaControlManager.validateQuotaKeyValue: the INVALID_REQUEST message, or None."""
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if kind == "long":
        if value > LONG_MAX:
            return f"Proposed value for {key} is too large for a LONG."
        if abs(value % 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


def format_value(key: str, value: float) -> str:
    """The stored text of a quota value: longs without a fraction, as Kafka's ZooKeeper JSON has them."""
    return str(int(round(value))) if QUOTA_KEYS.get(key) == "long" else repr(float(value))
