"""A small asyncio Kafka client on our own protocol codecs, for the admin tools and tests.

It speaks to brokers only over the wire (never through broker internals), so it works against
Apache Kafka as well as pybroker.
"""

from pybroker.client.admin import (
    AdminClient,
    ConfigEntry,
    ListedOffset,
    NewTopic,
    OffsetSpec,
    PartitionInfo,
    TopicDescription,
    TopicResult,
)
from pybroker.client.cluster import BrokerAddress, BrokerNode, KafkaClient, parse_bootstrap
from pybroker.client.connection import Connection
from pybroker.client.errors import (
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ResponseError,
    UnsupportedVersionError,
)
from pybroker.client.versions import NegotiatedVersions, VersionRange

__all__ = [
    "AdminClient", "BrokerAddress", "BrokerNode", "ConfigEntry", "Connection", "KafkaClient", "KafkaClientError",
    "KafkaConnectionError", "KafkaTimeoutError", "ListedOffset", "NegotiatedVersions", "NewTopic", "OffsetSpec",
    "PartitionInfo", "ResponseError", "TopicDescription", "TopicResult", "UnsupportedVersionError", "VersionRange",
    "parse_bootstrap",
]
