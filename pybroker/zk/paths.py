"""ZooKeeper-mode Kafka's znodes: one small codec per znode, pure (no I/O).

The layout and JSON shapes are Kafka's (`kafka.zk.ZkData`, see RECORDS.md section 6), so
ZooKeeper tooling and people who know Kafka find what they expect. JSON is compact; numbers that
Kafka writes as strings (timestamps, producer id block bounds, the /cluster/id version) stay strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pybroker.common.ids import LeaderEpoch
from pybroker.common.listeners import Endpoint, parse_listener
from pybroker.common.topic import TopicPartition

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
ISR_CHANGES = "/isr_change_notification"  # created as Kafka lays it out; ISR changes go by AlterPartition
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONFIG_CHANGE_PREFIX = "config_change_"

# Created at start-up by every broker (Kafka's ZkData.PersistentZkPaths, the ones we use).
PERSISTENT_PATHS = (BROKER_IDS, BROKER_TOPICS, DELETE_TOPICS, CONFIG_TOPICS, CONFIG_CHANGES, ISR_CHANGES,
                    PRODUCER_ID_BLOCK, "/consumers", "/brokers/seqid")


def _dump(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _load(data: bytes) -> Any:
    return json.loads(data.decode())


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


# /cluster/id


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["id"])


# /controller and /controller_epoch


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dump({"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms), "kraftControllerEpoch": -1})


def decode_controller(data: bytes) -> int:
    return int(_load(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# /brokers/ids/<id>


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    host: str  # of the listener the reader asked for (the inter-broker one), else the top-level fields
    port: int
    rack: str | None
    epoch: int = -1  # the czxid of the ephemeral znode; filled in by the reader
    endpoints: tuple[Endpoint, ...] = field(default=(), compare=False)  # every listener
    #: pybroker's own field (Kafka's readers skip unknown ones): the broker epoch of this broker process's
    #: first registration, carried by its re-registrations; -1 in a process's first registration
    started_epoch: int = field(default=-1, compare=False)

    @property
    def process_epoch(self) -> int:
        """The broker epoch at which this broker process first registered: a re-registration after a lost
        ZooKeeper session keeps it (the process and its log lived on), a restart changes it."""
        return self.started_epoch if self.started_epoch >= 0 else self.epoch


def encode_broker(host: str, port: int, rack: str | None, timestamp_ms: int,
                  endpoints: Sequence[Endpoint] = (), started_epoch: int | None = None) -> bytes:
    """Kafka's v5 registration: every listener in `endpoints` (a PLAINTEXT one at host:port when none
    is given) and their protocols; the top-level host and port are the first PLAINTEXT listener's.
    `started_epoch`: a re-registration's broker epoch of its process's first registration."""
    listed = list(endpoints) or [Endpoint("PLAINTEXT", host, port, "PLAINTEXT")]
    plaintext = next((e for e in listed if e.security_protocol == "PLAINTEXT"), None)
    document: dict[str, Any] = {
        "version": 5, "host": plaintext.host if plaintext else None, "port": plaintext.port if plaintext else -1,
        "endpoints": [e.uri() for e in listed],
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in listed}, "jmx_port": -1,
        "timestamp": str(timestamp_ms), "features": {},
    }
    if rack is not None:
        document["rack"] = rack
    if started_epoch is not None:
        document["started_epoch"] = started_epoch
    return _dump(document)


def decode_broker(broker_id: int, data: bytes, epoch: int, listener: str | None = None) -> BrokerRegistration:
    """A registration whose host and port are those of `listener` if it has one, else the top-level
    (PLAINTEXT) fields, else the first endpoint's."""
    document = _load(data)
    protocols = document.get("listener_security_protocol_map") or {}
    endpoints = []
    for uri in document.get("endpoints", []):
        name, host, port = parse_listener(uri)
        endpoints.append(Endpoint(name, host, port, protocols.get(name, name)))
    chosen = next((e for e in endpoints if e.listener == listener), None)
    if chosen is not None:
        host, port = chosen.host, chosen.port
    else:
        host, port = document.get("host"), document.get("port", -1)
        if not host and endpoints:
            host, port = endpoints[0].host, endpoints[0].port
    return BrokerRegistration(broker_id, host, int(port), document.get("rack"), epoch, tuple(endpoints),
                              int(document.get("started_epoch", -1)))


# /brokers/topics/<topic>


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    partitions: Mapping[int, tuple[int, ...]]
    topic_id: str | None
    #: replicas being added / removed by an ongoing reassignment, by partition (KIP-455)
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def _by_partition(replicas: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
    return {str(p): list(r) for p, r in sorted(replicas.items())}


def encode_topic(assignment: Mapping[int, Sequence[int]], topic_id: str, *,
                 adding: Mapping[int, Sequence[int]] | None = None,
                 removing: Mapping[int, Sequence[int]] | None = None) -> bytes:
    return _dump({"version": 3, "partitions": _by_partition(assignment),
                  "adding_replicas": _by_partition(adding or {}), "removing_replicas": _by_partition(removing or {}),
                  "topic_id": topic_id})


def decode_topic(data: bytes) -> TopicAssignment:
    document = _load(data)

    def by_partition(key: str) -> dict[int, tuple[int, ...]]:
        return {int(p): tuple(replicas) for p, replicas in (document.get(key) or {}).items()}

    return TopicAssignment(by_partition("partitions"), document.get("topic_id"), by_partition("adding_replicas"),
                           by_partition("removing_replicas"))


# /admin/reassign_partitions and /admin/preferred_replica_election: requests that ZooKeeper tooling writes


def encode_reassignment(targets: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                               for (t, p), r in sorted(targets.items())]})


def decode_reassignment(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    return {TopicPartition(entry["topic"], int(entry["partition"])): tuple(int(r) for r in entry["replicas"])
            for entry in _load(data)["partitions"]}


def encode_preferred_election(partitions: Sequence[TopicPartition]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_preferred_election(data: bytes) -> list[TopicPartition]:
    return [TopicPartition(entry["topic"], int(entry["partition"])) for entry in _load(data)["partitions"]]


# /brokers/topics/<topic>/partitions/<p>/state


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leadership as stored in ZooKeeper; `zk_version` is the znode's version.

    ``elect_longest_log``: the leader is gone and no ISR member that surely kept its log is live, so
    the partition has no leader until every ISR member is back, then the one with the longest log
    leads (see election.longest_log_election). Stored as an extra key, which Kafka's readers skip,
    so a controller elected meanwhile carries the wait on."""

    leader: int
    leader_epoch: LeaderEpoch
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    elect_longest_log: bool = False


NO_LEADER = -1
ELECT_LONGEST_LOG = "elect_longest_log"
LEADER_DURING_DELETE = -2  # UpdateMetadata's mark of a deleted topic's partition (Kafka's LeaderDuringDelete)


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    document = {"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                "isr": list(state.isr), "controller_epoch": state.controller_epoch}
    if state.elect_longest_log:
        document[ELECT_LONGEST_LOG] = True
    return _dump(document)


def decode_partition_state(data: bytes, zk_version: int) -> LeaderAndIsr:
    document = _load(data)
    return LeaderAndIsr(int(document["leader"]), LeaderEpoch(int(document["leader_epoch"])), tuple(document["isr"]),
                        int(document["controller_epoch"]), zk_version,
                        document.get(ELECT_LONGEST_LOG) is True)


# /config/topics/<topic> and /config/changes/config_change_<seq>


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(configs)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    """A config entity node's keys; an empty node (the /config/users/<user> that ZooKeeper creates
    as the parent of a user's client-id quotas) has none, as Kafka's ConfigEntityZNode.decode reads it."""
    if not data:
        return {}
    return {str(k): str(v) for k, v in _load(data).get("config", {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    """``entity_path`` as Kafka writes it: "topics/orders", "users/alice", "users/alice/clients/app"."""
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> tuple[str, str]:
    """(entity type, entity name), e.g. ("topics", "orders")."""
    kind, _, name = str(_load(data).get("entity_path", "")).partition("/")
    return kind, name


# /latest_producer_id_block


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker_id: int
    start: int
    end: int  # inclusive, as Kafka writes it


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _dump({"version": 1, "broker": block.broker_id, "block_start": str(block.start),
                  "block_end": str(block.end)})


def decode_producer_id_block(data: bytes) -> ProducerIdBlock | None:
    if not data:
        return None
    document = _load(data)
    return ProducerIdBlock(int(document["broker"]), int(document["block_start"]), int(document["block_end"]))
