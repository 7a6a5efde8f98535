"""A small asyncio Kafka client on our own protocol codecs, for the admin tools and tests.

It speaks to brokers only over the wire (never through broker internals), so it works against
Apache Kafka as well as pybroker.

Its modules load on first use of a name (PEP 562): the broker imports ``pybroker.client.sasl`` and
``.connection`` for its inter-broker links and should not pay for the admin, group and producer code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from pybroker.client.consumer_member import ConsumerGroupMember, ConsumerMemberSettings
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
    "Connection", "ConsumerGroupMember", "ConsumerMemberSettings", "ConsumerRecord", "FetchSettings", "Fetcher",
    "GroupAdmin", "GroupDescription", "GroupMember", "KafkaClient", "KafkaClientError", "KafkaConnectionError", "KafkaTimeoutError", "ListedGroup", "ListedOffset",
    "MemberDescription", "MembershipSettings", "NegotiatedVersions", "NewTopic", "OffsetSpec", "PartitionFetch",
    "PartitionInfo", "ProduceResult", "Producer", "ResponseError", "TopicDescription", "TopicResult",
    "UnsupportedVersionError", "VersionRange", "parse_bootstrap",
]

_MODULE_OF = {
    "AdminClient": "admin",
    "BROKER_RESOURCE": "admin",
    "BrokerAddress": "cluster",
    "BrokerNode": "cluster",
    "ConfigEntry": "admin",
    "ConfigSynonym": "admin",
    "Connection": "connection",
    "ConsumerGroupMember": "consumer_member",
    "ConsumerMemberSettings": "consumer_member",
    "ConsumerRecord": "fetcher",
    "FetchSettings": "fetcher",
    "Fetcher": "fetcher",
    "GroupAdmin": "groups",
    "GroupDescription": "groups",
    "GroupMember": "membership",
    "KafkaClient": "cluster",
    "KafkaClientError": "errors",
    "KafkaConnectionError": "errors",
    "KafkaTimeoutError": "errors",
    "ListedGroup": "groups",
    "ListedOffset": "admin",
    "MemberDescription": "groups",
    "MembershipSettings": "membership",
    "NegotiatedVersions": "versions",
    "NewTopic": "admin",
    "OffsetSpec": "admin",
    "PartitionFetch": "fetcher",
    "PartitionInfo": "admin",
    "ProduceResult": "producer",
    "Producer": "producer",
    "ResponseError": "errors",
    "TOPIC_RESOURCE": "admin",
    "TopicDescription": "admin",
    "TopicResult": "admin",
    "UnsupportedVersionError": "errors",
    "VersionRange": "versions",
    "parse_bootstrap": "cluster",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
