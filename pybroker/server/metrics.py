"""Kafka's request names as the request path reports them (logs, errors) and the metrics label them.

Kept apart from ``broker_metrics`` so the dispatcher can name requests without loading prometheus_client.
"""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey


def request_name(api_key: int) -> str:
    """Kafka's request name for an API key, e.g. ``DescribeTopicPartitions`` (``RequestMetrics,request=...``)."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)
