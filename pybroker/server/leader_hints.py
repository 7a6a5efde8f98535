"""Where a partition's leader is, for a client that wrote to or read from the wrong broker (KIP-951).

With NOT_LEADER_OR_FOLLOWER (and, for Fetch, FENCED_LEADER_EPOCH) Kafka's Produce v10+ and Fetch v16+ answers carry
the partition's leader and leader epoch as this broker knows them (``CurrentLeader``) and that leader's endpoint on
the listener the request came in on (``NodeEndpoints``), as Kafka's ``KafkaApis.getCurrentLeader`` fills them: the
Java client (3.7+) moves its batches or fetches there at once instead of waiting for a metadata refresh. A leader that
is unknown is -1, and a leader not registered (or without that listener) gets no endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.controller.metadata import ClusterMetadata
from pybroker.protocol.error_codes import ErrorCode

FIRST_PRODUCE_VERSION = 10
FIRST_FETCH_VERSION = 16
PRODUCE_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER})
FETCH_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


@dataclass(frozen=True, slots=True)
class LeaderEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class LeaderHint:
    leader_id: int = -1
    leader_epoch: int = -1
    endpoint: LeaderEndpoint | None = None


def leader_hint(metadata: ClusterMetadata, listener: str, topic: str, index: int) -> LeaderHint:
    """The leader of ``topic``-``index`` this broker's metadata names, and its endpoint on ``listener``."""
    info = metadata.topic(topic)
    partition = info.partitions.get(index) if info is not None else None
    if partition is None or partition.leader < 0:
        return LeaderHint()
    broker = next((b for b in metadata.brokers() if b.broker_id == partition.leader), None)
    address = broker.endpoint(listener) if broker is not None else None
    endpoint = None if broker is None or address is None else \
        LeaderEndpoint(broker.broker_id, address[0], address[1], broker.rack)
    return LeaderHint(partition.leader, partition.leader_epoch, endpoint)
