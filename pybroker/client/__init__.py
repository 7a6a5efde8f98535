"""A small asyncio Kafka client on our own protocol codecs, for the admin tools and tests.

It speaks to brokers only over the wire (never through broker internals), so it works against
Apache Kafka as well as pybroker.
"""

from pybroker.client.admin import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    AdminClient,
    ConfigEntry,
    ConfigSynonym,
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
from pybroker.client.fetcher import ConsumerRecord, Fetcher, FetchSettings, PartitionFetch
from pybroker.client.groups import GroupAdmin, GroupDescription, ListedGroup, MemberDescription
from pybroker.client.membership import GroupMember, MembershipSettings
from pybroker.client.producer import Producer, ProduceResult
from pybroker.client.versions import NegotiatedVersions, VersionRange

__all__ = [
    "BROKER_RESOURCE", "TOPIC_RESOURCE", "AdminClient", "BrokerAddress", "BrokerNode", "ConfigEntry", "ConfigSynonym",
    "Connection", "ConsumerRecord", "FetchSettings", "Fetcher", "GroupAdmin", "GroupDescription", "GroupMember",
    "KafkaClient", "KafkaClientError", "KafkaConnectionError", "KafkaTimeoutError", "ListedGroup", "ListedOffset",
    "MemberDescription", "MembershipSettings", "NegotiatedVersions", "NewTopic", "OffsetSpec", "PartitionFetch",
    "PartitionInfo", "ProduceResult", "Producer", "ResponseError", "TopicDescription", "TopicResult",
    "UnsupportedVersionError", "VersionRange", "parse_bootstrap",
]
