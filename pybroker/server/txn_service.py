"""The broker's transaction coordinator: the pure state machine, its runtime, ``__transaction_state``
and the transaction markers.

The internal topic is created on first use (FindCoordinator for a transactional id, or any
transactional request, which then answers NOT_COORDINATOR at once: ``internal_topic.InternalTopic.ensure``),
compacted, with ``transaction.state.log.num.partitions`` partitions.
Whenever this broker becomes the leader of one of its partitions (at start-up, on creation, or
after a failover) the partition is replayed into the coordinator, with the new leader epoch as the
coordinator epoch; transactions found open are then aborted when they time out, and those found
in PrepareCommit/PrepareAbort get their markers again (RECORDS.md §4). When it stops leading, the
partition's transactional ids are dropped and answered NOT_COORDINATOR.

Markers are written here to the partitions this broker leads, and sent through WriteTxnMarkers
(``txn_markers.MarkerChannel``) to the leaders of the others; WriteTxnMarkers from another
coordinator lands in the same local path. Every write to ``__transaction_state``, a marker and a
transactional offset commit waits until the partition's in-sync replicas hold it (acks=-1, within
``request.timeout.ms``; ``offsets.commit.timeout.ms`` for offsets), as Kafka's coordinators do. A
marker reaching a partition of ``__consumer_offsets`` also makes the offsets of that transaction
visible, or drops them.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any, Callable, Iterable, Iterator

from pybroker.client.sasl import SaslCredentials
from pybroker.common.clock import Clock
from pybroker.common.config import BrokerConfig
from pybroker.common.ids import ProducerEpoch, ProducerId
from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import TopicPartition
from pybroker.zk import paths as zp
from pybroker.controller.metadata import BrokerInfo
from pybroker.zk.client import ZkClient
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.loader import decoded_records
from pybroker.coordinator.txn_coordinator import MarkerRequest, TransactionCoordinator, TxnConfig, TxnOutcome
from pybroker.coordinator.txn_records import TV_1, TV_2, TxnEntry, decode_txn_record
from pybroker.coordinator.txn_runtime import TxnRuntime
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import TxnOffsetCommitRequest
from pybroker.records import RecordInput, build_batch, build_end_txn_marker, iter_batches
from pybroker.replication.append_queue import Turns
from pybroker.replication.errors import UnknownPartitionError
from pybroker.replication.manager import ReplicaManager
from pybroker.server.coordinator_loads import CoordinatorPartitions, LoadSteps, LogSource
from pybroker.server.error_mapping import error_code_for
from pybroker.server.features import TRANSACTION_VERSION, FeatureStore
from pybroker.server.group_service import OFFSETS_TOPIC
from pybroker.server.internal_topic import InternalTopic, MetadataSource
from pybroker.server.txn_markers import MarkerChannel

log = logging.getLogger("pybroker.coordinator")

TXN_TOPIC = "__transaction_state"


class TxnService:
    def __init__(self, config: BrokerConfig, broker_id: int, metadata: MetadataSource, replicas: ReplicaManager,
                 logs: LogSource, io: IoExecutor, groups: GroupCoordinator, clock: Clock, features: FeatureStore, *,
                 zk: ZkClient | None, inter_broker_tls: ssl.SSLContext | None,
                 inter_broker_sasl: SaslCredentials | None) -> None:
        self._broker_id = broker_id
        self._metadata = metadata
        self._replicas = replicas
        self._groups = groups
        self._zk = zk
        self._clock = clock
        self.coordinator = TransactionCoordinator(TxnConfig(
            num_partitions=config["transaction.state.log.num.partitions"],
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_check_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            expiration_check_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
        ), transaction_version=lambda: features.current.levels.get(TRANSACTION_VERSION, 0))
        self.topic = InternalTopic(
            metadata, replicas, TXN_TOPIC, partitions=config["transaction.state.log.num.partitions"],
            replication_factor=config["transaction.state.log.replication.factor"],
            configs=lambda factor: {
                "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
                "min.insync.replicas": str(min(config["transaction.state.log.min.isr"], factor))},
            replication_timeout_ms=config["request.timeout.ms"], clock=clock.wall_ms)
        self.runtime = TxnRuntime(self.coordinator, self.topic.append, self.write_markers,
                                  lambda: metadata().allocate_producer_id(), clock, self.topic.replicated)
        self._markers = MarkerChannel(config["request.timeout.ms"], inter_broker_tls, inter_broker_sasl)
        self._request_timeout_s = config["request.timeout.ms"] / 1000
        self._offsets_timeout_s = config["offsets.commit.timeout.ms"] / 1000
        self._verify = config["transaction.partition.verification.enable"]
        self.admissions: Turns[tuple[ProducerId, TopicPartition]] = Turns()
        """Per producer and partition, the transactional Produce requests being admitted or appended: a later one
        waits its turn, so the appends keep the order the requests arrived in (Kafka handles one at a time)."""
        self.partitions = CoordinatorPartitions(TXN_TOPIC, logs, io, LoadSteps(
            replay=_replay, apply=self._apply, unload=self.runtime.unload, keys="transactional id(s)",
            epoch="coordinator epoch"))
        """The partitions of the internal topic whose transactional ids this broker coordinates or is loading."""
        self.on_leadership_change = self.partitions.on_leadership_change

    def start(self) -> asyncio.Task[None]:
        """Run the coordinator's timers (partitions are loaded as this broker becomes their leader)."""
        return asyncio.get_running_loop().create_task(self.runtime.run_timers(), name="txn-coordinator")

    async def close(self) -> None:
        await self._markers.close()

    def owns(self, transactional_id: str) -> bool:
        return self.coordinator.partition_of(transactional_id) in self.partitions.loaded

    def not_owned_error(self, transactional_id: str) -> ErrorCode:
        """What a request for an id this broker does not serve gets: it may be loading it."""
        return self.partitions.not_owned_error(self.coordinator.partition_of(transactional_id))

    def _apply(self, partition: int, leader_epoch: int, entries: list[TxnEntry]) -> int:
        """The new leader epoch is the coordinator epoch of the partition's markers."""
        self.coordinator.coordinator_epochs[partition] = leader_epoch
        self.coordinator.load(entries)
        self.runtime.wake()
        return sum(1 for t in self.coordinator.transactions if self.coordinator.partition_of(t) == partition)

    async def call(self, operation: Callable[[Any, int], TxnOutcome]) -> Any:
        """Run one coordinator operation. The callers found this broker leading the id's partition, so the internal
        topic exists: nothing here creates it or waits for its leaders."""
        return await self.runtime.call(operation)  # type: ignore[arg-type]

    def coordinator_node(self, transactional_id: str) -> int | None:
        """The broker leading the transactional id's partition of ``__transaction_state``."""
        return self.topic.leader(self.coordinator.partition_of(transactional_id))

    # ------------------------------------------------------------------ markers

    async def write_markers(self, marker: MarkerRequest) -> dict[TopicPartition, ErrorCode]:
        """The runtime's marker writer: the answer per partition (the runtime retries or gives up as Kafka's
        marker channel does). Partitions of a topic this broker's metadata no longer has are done: their
        topic was deleted (Kafka's marker channel drops them the same way, on the coordinator, never on the
        broker that receives the markers). In ZooKeeper mode only once ZooKeeper confirms the topic is gone
        (until then every partition is UNKNOWN_TOPIC_OR_PARTITION, retried): a restarted broker's cache lacks
        topics until the controller's UpdateMetadata gives them (its LeaderAndIsr comes first), and a
        coordinator that loaded its transactions meanwhile took every partition for deleted and completed the
        transaction without a marker (chaos rounds 3004, 3007 and 3013: the records of a committed transaction
        closed by the producer's next ABORT marker, an aborted one's by the next COMMIT, or a transaction left
        open for good)."""
        metadata = self._metadata()
        missing = {topic for topic, _ in marker.partitions if metadata.topic(topic) is None}
        if missing and not await self._deleted(missing):
            log.info("Markers of transaction %s wait for this broker's metadata of %s", marker.transactional_id,
                     sorted(missing))
            return {TopicPartition(*tp): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in marker.partitions}
        local, remote = self._route([tp for tp in marker.partitions if metadata.topic(tp[0]) is not None])
        sends = [self._markers.send(broker, marker, partitions) for broker, partitions in remote.values()]
        answers = await asyncio.gather(self.write_marker(marker.producer_id, marker.producer_epoch,
                                                         marker.coordinator_epoch, marker.commit, local,
                                                         transaction_version=marker.transaction_version), *sends)
        codes = {TopicPartition(*tp): ErrorCode.NONE for tp in marker.partitions}  # a deleted topic's are done
        for answer in answers:
            codes.update(answer)
        return codes

    async def _deleted(self, topics: set[str]) -> bool:
        """Whether every one of `topics`, missing from this broker's metadata, is deleted or being deleted
        (ZooKeeper says; without ZooKeeper this broker's metadata is the cluster's)."""
        if self._zk is None:
            return True
        for topic in topics:
            if await self._zk.get(zp.topic_path(topic)) is not None and \
                    await self._zk.get(zp.delete_topic_path(topic)) is None:
                return False
        return True

    def _route(self, partitions: Iterable[TopicPartition]
               ) -> tuple[list[TopicPartition], dict[int, tuple[BrokerInfo, list[TopicPartition]]]]:
        """Split partitions into this broker's and, per other live leader, theirs. A partition
        without a known live leader stays local, where it fails and is retried later."""
        metadata = self._metadata()
        brokers = {b.broker_id: b for b in metadata.brokers()}
        local: list[TopicPartition] = []
        remote: dict[int, tuple[BrokerInfo, list[TopicPartition]]] = {}
        for topic, index in partitions:
            info = metadata.topic(topic)
            leader = info.partitions[index].leader if info is not None and index in info.partitions else -1
            if leader == self._broker_id or leader not in brokers:
                local.append(TopicPartition(topic, index))
            else:
                remote.setdefault(leader, (brokers[leader], []))[1].append(TopicPartition(topic, index))
        return local, remote

    async def write_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                           partitions: Iterable[TopicPartition], *,
                           transaction_version: int) -> dict[TopicPartition, ErrorCode]:
        """Append a COMMIT/ABORT marker to each partition and wait for its ISR. A partition this broker
        does not host is UNKNOWN_TOPIC_OR_PARTITION, to be retried, as Kafka's replica manager answers:
        taking it for a deleted topic made a broker whose metadata had not arrived yet (just restarted)
        report a marker written that never was, and the transaction stayed open there for good. A V2
        transaction's marker (``transaction_version`` 2) must carry an epoch above the producer's
        (INVALID_PRODUCER_EPOCH otherwise: a late marker of an earlier transaction)."""
        results: dict[TopicPartition, ErrorCode] = {}
        appended: dict[TopicPartition, int] = {}
        for topic, index in partitions:
            now = self._clock.wall_ms()
            batch = build_end_txn_marker(commit, producer_id=producer_id, producer_epoch=producer_epoch,
                                         coordinator_epoch=coordinator_epoch, timestamp=now)
            try:
                info = self._replicas.append(topic, index, bytearray(batch), required_acks=-1, now_ms=now,
                                             transaction_version=transaction_version)
            except UnknownPartitionError:
                results[TopicPartition(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            except Exception as exc:
                results[TopicPartition(topic, index)] = error_code_for(exc)
                continue
            appended[TopicPartition(topic, index)] = info.last_offset + 1
        waits = [self._wait_for_isr(topic, index, end, self._request_timeout_s)
                 for (topic, index), end in appended.items()]
        for (topic, index), code in zip(appended, await asyncio.gather(*waits)):
            results[TopicPartition(topic, index)] = code
            if topic == OFFSETS_TOPIC and code is ErrorCode.NONE:  # offsets show once the marker is replicated
                self._groups.complete_txn_offsets(producer_id, index, commit=commit,
                                                                     now_ms=self._clock.wall_ms())
        return results

    async def _wait_for_isr(self, topic: str, index: int, end_offset: int, timeout_s: float) -> ErrorCode:
        try:
            await self._replicas.wait_for_high_watermark(topic, index, end_offset, timeout_s)
        except Exception as exc:
            return error_code_for(exc)
        return ErrorCode.NONE

    async def admit(self, transactional_id: str, producer_id: ProducerId, producer_epoch: ProducerEpoch,
                    partitions: list[TopicPartition], *, implicit: bool) -> ErrorCode:
        """What a transactional write to ``partitions`` needs before it is appended, from the coordinator of
        ``transactional_id`` (this broker or another, through AddPartitionsToTxn v5): a V2 client's (Produce
        v12+, TxnOffsetCommit v5: ``implicit``, KIP-890 part 2) are added to its transaction; a V1 client's are
        verified to be in it (KIP-890 part 1, ``transaction.partition.verification.enable``), so a late batch
        cannot open a transaction nobody will end (INVALID_TXN_STATE). The coordinator's code is returned;
        NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE when it cannot be asked. When this broker is the coordinator
        it checks what it checks for another leader's AddPartitionsToTxn (Kafka's leader always sends one, to
        itself too): a partition its metadata does not know is UNKNOWN_TOPIC_OR_PARTITION and nothing is added
        (the group's partition of __consumer_offsets, which TxnOffsetCommit v5 adds, included)."""
        if not implicit and not self._verify:
            return ErrorCode.NONE
        node = self.coordinator_node(transactional_id)
        brokers = {b.broker_id: b for b in self._metadata().brokers()}
        if node == self._broker_id:
            if self.unknown_partitions(partitions):
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not self.owns(transactional_id):
                code = self.not_owned_error(transactional_id)
            else:
                code = await self.call(lambda waiter, now: self.coordinator.add_partitions(
                    waiter, transactional_id, producer_id, producer_epoch, partitions, now, verify_only=not implicit,
                    client_version=TV_2 if implicit else TV_1))
        elif node in brokers:
            code = await self._markers.add_partitions(brokers[node], transactional_id, producer_id, producer_epoch,
                                                      partitions, verify_only=not implicit)
        else:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return code

    def unknown_partitions(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """The partitions this broker's metadata does not know: Kafka's coordinator answers AddPartitionsToTxn
        UNKNOWN_TOPIC_OR_PARTITION for them before it looks at the transaction (metadataCache.contains)."""
        metadata = self._metadata()
        unknown = set()
        for topic, index in partitions:
            info = metadata.topic(topic)
            if info is None or index not in info.partitions:
                unknown.add(TopicPartition(topic, index))
        return unknown

    # ------------------------------------------------------------------ TxnOffsetCommit

    async def commit_offsets(self, request: TxnOffsetCommitRequest) -> dict[TopicPartition, ErrorCode]:
        """Write a TxnOffsetCommit's offsets in the producer's transaction (visible on COMMIT) and
        wait for the ISR of the group's partition, within ``offsets.commit.timeout.ms``."""
        groups = self._groups
        wanted = [TopicPartition(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        error = groups.validate_txn_offsets(request)
        if error is not ErrorCode.NONE:
            return {tp: error for tp in wanted}
        entries, records, errors = groups.txn_offset_records(request, self._clock.wall_ms())
        if records:
            batch = build_batch([RecordInput(key, value) for key, value in records],
                                producer_id=request.producer_id, producer_epoch=request.producer_epoch,
                                is_transactional=True)
            partition = groups.partition_of(request.group_id)
            try:
                info = self._replicas.append(OFFSETS_TOPIC, partition, bytearray(batch),
                                                           required_acks=-1, now_ms=self._clock.wall_ms())
            except Exception as exc:
                return {tp: errors.get(tp, _coordinator_code(error_code_for(exc))) for tp in wanted}
            code = await self._wait_for_isr(OFFSETS_TOPIC, partition, info.last_offset + 1, self._offsets_timeout_s)
            if code is not ErrorCode.NONE:  # not staged: the producer retries or aborts
                return {tp: errors.get(tp, _coordinator_code(code)) for tp in wanted}
            groups.stage_txn_offsets(request.producer_id, entries)
        return {tp: errors.get(tp, ErrorCode.NONE) for tp in wanted}


OFFSET_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_SERVER_ERROR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
"""How Kafka's group coordinator answers a TxnOffsetCommit whose offsets could not be written
(GroupCoordinatorService.handleOperationException): too few replicas or a timeout COORDINATOR_NOT_AVAILABLE and a
lost leadership NOT_COORDINATOR, both of which the producer retries (librdkafka takes NOT_ENOUGH_REPLICAS for an
abortable error of the transaction). NOT_ENOUGH_REPLICAS_AFTER_APPEND, which Kafka's runtime never meets (it waits
for the high watermark itself, and times out), is its timeout here; an unexpected failure is retried too."""


def _coordinator_code(code: ErrorCode) -> ErrorCode:
    return OFFSET_WRITE_ERRORS.get(code, code)


def _replay(chunks: Iterable[bytes]) -> Iterator[TxnEntry]:
    for chunk in chunks:
        for batch in iter_batches(chunk):
            if not batch.is_control:
                yield from decoded_records(batch, decode_txn_record, TXN_TOPIC)
