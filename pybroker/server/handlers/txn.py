"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27),
TxnOffsetCommit (28), DescribeProducers (61), DescribeTransactions (65), ListTransactions (66).

Thin: requests are checked for what the request layer owns (this broker is the coordinator,
the topics exist), then handed to the transaction coordinator through ``TxnService``.
Transactions V2 (KIP-890 part 2): EndTxn v5 ends the transaction with an epoch bump and answers the
producer id and epoch to go on with; the partitions were added by the leaders the client's Produce v12+
reached (``TxnService.add_partition``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from pybroker.common.ids import ProducerEpoch, ProducerId
from pybroker.common.topic import INTERNAL_TOPICS, TopicPartition
from pybroker.coordinator.runtime import CoordinatorStorageError
from pybroker.coordinator.txn_coordinator import InitResult
from pybroker.coordinator.txn_records import TV_1, TV_2, TxnState
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize, authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.group_service import OFFSETS_TOPIC
from pybroker.server.request_channel import leave_request_queue
from pybroker.server.registry import api

FIRST_PRODUCER_FENCED_VERSION = 2  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
FIRST_BATCHED_ADD_VERSION = 4
FIRST_EPOCH_BUMP_END_VERSION = 5  # EndTxn v5: transactions V2
FIRST_IMPLICIT_ADD_OFFSETS_VERSION = 5  # TxnOffsetCommit v5: transactions V2
FIRST_TRANSACTION_ABORTABLE_OFFSETS_VERSION = 4  # TxnOffsetCommit v4: the client handles TRANSACTION_ABORTABLE
AddResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult
AddTopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult


def fenced_code(code: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    """Clients older than KIP-588 only understand INVALID_PRODUCER_EPOCH."""
    if code is ErrorCode.PRODUCER_FENCED and version < first_fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


async def txn_call(ctx: RequestContext, transactional_id: str, operation: Callable[[Any, int], Any], *,
                   from_client: bool = True) -> Any:
    """Run a coordinator operation for ``transactional_id``; returns its answer or an ErrorCode. Calls
    from clients need Write on the transactional id; brokers' (AddPartitionsToTxn v4+) ClusterAction."""
    service = ctx.services.txns
    if not transactional_id:
        return ErrorCode.INVALID_REQUEST
    if from_client and not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # Kafka's check of every transactional call
    try:
        await service.topic.ensure()  # not led yet: NOT_COORDINATOR, as Kafka's getTransactionState
        if not service.owns(transactional_id):
            return service.not_owned_error(transactional_id)
        leave_request_queue()  # the record waits for the ISR of __transaction_state
        return await service.call(operation)
    except CoordinatorStorageError as exc:
        return append_error(exc.__cause__)
    except Exception as exc:
        code = error_code_for(exc)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE if code is ErrorCode.UNKNOWN_SERVER_ERROR else code


APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
"""How Kafka's TransactionStateManager.appendTransactionToLog answers a failed append of __transaction_state
(a timeout too is COORDINATOR_NOT_AVAILABLE, so the client retries); any other code goes out as it is."""


def append_error(cause: BaseException | None) -> ErrorCode:
    """The answer to a request whose __transaction_state record failed with ``cause``; COORDINATOR_NOT_AVAILABLE
    when the cause is unknown."""
    if cause is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    code = error_code_for(cause)
    return APPEND_ERRORS.get(code, code)


async def _add_partitions(ctx: RequestContext, txn: AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction,
                          *, verify_only: bool) -> list[AddTopicResult]:
    """One transaction of AddPartitionsToTxn: the same code for every partition (Kafka's rule), except
    that partitions of topics a client may not Write (internal ones never) or that do not exist fail the
    request and the others are then OPERATION_NOT_ATTEMPTED."""
    wanted = [TopicPartition(t.name, p) for t in txn.topics for p in t.partitions]
    from_client = ctx.api_version < FIRST_BATCHED_ADD_VERSION
    refused: set[TopicPartition] = set()
    if from_client and txn.transactional_id and not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                              txn.transactional_id):
        return _same_code(txn, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if from_client:
        writable = allowed_names(ctx, AclOperation.WRITE, ResourceType.TOPIC,
                                 (t.name for t in txn.topics if t.name not in INTERNAL_TOPICS))
        refused = {tp for tp in wanted if tp[0] not in writable}
    unknown = ctx.services.txns.unknown_partitions([tp for tp in wanted if tp not in refused])
    codes: dict[TopicPartition, ErrorCode]
    if unknown or refused:
        codes = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp in refused else
                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                 for tp in wanted}
    else:
        coordinator = ctx.services.txns.coordinator
        # A leader's add (v4+, not verify-only) is the implicit add of a V2 client's Produce or TxnOffsetCommit.
        version = TV_1 if from_client or verify_only else TV_2
        code = await txn_call(ctx, txn.transactional_id, lambda waiter, now: coordinator.add_partitions(
            waiter, txn.transactional_id, ProducerId(txn.producer_id), ProducerEpoch(txn.producer_epoch), wanted, now,
            verify_only=verify_only,
            client_version=version), from_client=from_client)
        code = fenced_code(code, ctx.api_version, FIRST_PRODUCER_FENCED_VERSION)
        codes = {tp: code for tp in wanted}
    return [AddTopicResult(name=t.name, results_by_partition=[
        AddResult(partition_index=p, partition_error_code=codes[TopicPartition(t.name, p)]) for p in t.partitions])
        for t in txn.topics]


def _same_code(txn: AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction, code: ErrorCode) -> list[AddTopicResult]:
    return [AddTopicResult(name=t.name, results_by_partition=[
        AddResult(partition_index=p, partition_error_code=code) for p in t.partitions]) for t in txn.topics]


@api(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx: RequestContext, request: AddPartitionsToTxnRequest
                                ) -> AddPartitionsToTxnResponse:
    if ctx.api_version < FIRST_BATCHED_ADD_VERSION:
        txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=request.v3_and_below_transactional_id,
            producer_id=request.v3_and_below_producer_id, producer_epoch=request.v3_and_below_producer_epoch,
            topics=request.v3_and_below_topics)
        return AddPartitionsToTxnResponse(throttle_time_ms=0,
                                          results_by_topic_v3_and_below=await _add_partitions(ctx, txn,
                                                                                              verify_only=False))
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):  # v4+ come from brokers only (Kafka's check)
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results = [AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
        transactional_id=txn.transactional_id, topic_results=await _add_partitions(ctx, txn,
                                                                                   verify_only=txn.verify_only))
        for txn in request.transactions]
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0, results_by_transaction=results)


@api(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    groups = ctx.services.groups
    # Kafka's checks, in order: Write on the transactional id, Read on the group.
    if request.transactional_id and not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                  request.transactional_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        await groups.topic.ensure()  # only the partition's number is needed here
    except Exception:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    partition = TopicPartition(OFFSETS_TOPIC, groups.coordinator.partition_of(request.group_id))
    coordinator = ctx.services.txns.coordinator
    code = await txn_call(ctx, request.transactional_id, lambda waiter, now: coordinator.add_partitions(
        waiter, request.transactional_id, ProducerId(request.producer_id), ProducerEpoch(request.producer_epoch),
        [partition], now))
    return AddOffsetsToTxnResponse(throttle_time_ms=0,
                                   error_code=fenced_code(code, ctx.api_version, FIRST_PRODUCER_FENCED_VERSION))


@api(ApiKey.END_TXN, 0, 5)
async def end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    coordinator = ctx.services.txns.coordinator
    bump = ctx.api_version >= FIRST_EPOCH_BUMP_END_VERSION
    fresh = None
    if bump and coordinator.end_needs_producer_id(request.transactional_id):
        try:
            fresh = await ctx.services.metadata.allocate_producer_id()
        except Exception as exc:  # noqa: BLE001 - mapped in one place; the client retries
            return EndTxnResponse(throttle_time_ms=0, error_code=error_code_for(exc))
    result = await txn_call(ctx, request.transactional_id, lambda waiter, now: coordinator.end_txn(
        waiter, request.transactional_id, ProducerId(request.producer_id), ProducerEpoch(request.producer_epoch),
        request.committed, now,
        bump_epoch=bump, fresh_producer_id=fresh))
    if not isinstance(result, InitResult):
        result = InitResult(result)
    return EndTxnResponse(throttle_time_ms=0, producer_id=result.producer_id, producer_epoch=result.producer_epoch,
                          error_code=fenced_code(result.error, ctx.api_version, FIRST_PRODUCER_FENCED_VERSION))


@api(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def txn_offset_commit(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    """v5 (transactions V2) also adds the group's partition of __consumer_offsets to the transaction, in place of
    the V1 client's AddOffsetsToTxn; v0-4 have it verified to be there (KIP-890 part 1)."""
    wanted = [TopicPartition(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    readable = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    unknown = ctx.services.txns.unknown_partitions([tp for tp in wanted if tp[0] in readable])
    groups = ctx.services.groups
    try:
        await groups.topic.ensure()  # the group's partition not led yet: NOT_COORDINATOR below
        if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            codes = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            codes = dict.fromkeys(wanted, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        elif not groups.owns(request.group_id):
            codes = dict.fromkeys(wanted, groups.not_owned_error(request.group_id))
        elif (refused := await _admit_offsets(ctx, request, readable)) is not ErrorCode.NONE:
            codes = {tp: refused if tp[0] in readable else ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in wanted}
        else:
            codes = await ctx.services.txns.commit_offsets(dataclasses.replace(
                request, topics=[t for t in request.topics if t.name in readable]))
            codes.update((tp, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for tp in wanted if tp[0] not in readable)
    except Exception:
        codes = {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in wanted}
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if TopicPartition(t.name, p.partition_index) in unknown
                else codes.get(TopicPartition(t.name, p.partition_index), ErrorCode.NONE))
            for p in t.partitions]) for t in request.topics])


async def _admit_offsets(ctx: RequestContext, request: TxnOffsetCommitRequest, readable: set[str]) -> ErrorCode:
    """The group's partition of __consumer_offsets added to a V2 client's transaction, or verified to be in a V1
    client's (Kafka's CoordinatorPartitionWriter.maybeStartTransactionVerification, under
    ``transaction.partition.verification.enable``), before any offset is written; only when some topic may be
    committed. The codes as Kafka's group coordinator answers them: TRANSACTION_ABORTABLE from v4 and
    INVALID_TXN_STATE before, a fenced producer INVALID_PRODUCER_EPOCH, a timed-out ask or a partition the
    transaction coordinator's metadata does not know yet COORDINATOR_NOT_AVAILABLE (GroupCoordinatorService's
    handleOperationException), which the producer retries."""
    if not any(t.name in readable for t in request.topics):
        return ErrorCode.NONE
    partition = TopicPartition(OFFSETS_TOPIC, ctx.services.groups.coordinator.partition_of(request.group_id))
    code = await ctx.services.txns.admit(request.transactional_id, ProducerId(request.producer_id),
                                         ProducerEpoch(request.producer_epoch), [partition],
                                         implicit=ctx.api_version >= FIRST_IMPLICIT_ADD_OFFSETS_VERSION)
    if code is ErrorCode.TRANSACTION_ABORTABLE and ctx.api_version < FIRST_TRANSACTION_ABORTABLE_OFFSETS_VERSION:
        return ErrorCode.INVALID_TXN_STATE
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


@api(ApiKey.WRITE_TXN_MARKERS, 1, 2)
async def write_txn_markers(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """Write the markers a coordinator (or Admin.abortTransaction) asks for; v2 says which transaction version
    each marker ends (KIP-1228: a V2 marker's epoch is the bumped one, checked as such), v1's are legacy."""
    results = []
    refused = not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)  # Kafka: ClusterAction, else every partition
    for marker in request.markers:
        if refused:
            results.append(WriteTxnMarkersResponse.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=[
                WriteTxnMarkersResponse.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                    WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult(
                        partition_index=p, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                    for p in t.partition_indexes]) for t in marker.topics]))
            continue
        partitions = [TopicPartition(t.name, p) for t in marker.topics for p in t.partition_indexes]
        codes = await ctx.services.txns.write_marker(marker.producer_id, marker.producer_epoch,
                                                   marker.coordinator_epoch, marker.transaction_result, partitions,
                                                   transaction_version=marker.transaction_version)
        results.append(WriteTxnMarkersResponse.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=[
            WriteTxnMarkersResponse.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult(
                    partition_index=p, error_code=codes.get(TopicPartition(t.name, p), ErrorCode.NONE))
                for p in t.partition_indexes]) for t in marker.topics]))
    return WriteTxnMarkersResponse(markers=results)


@api(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    topics = []
    readable = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            response = DescribeProducersResponse.PartitionResponse(partition_index=index, error_code=0)
            if topic.name not in readable:  # Kafka's check: Read on the topic
                response.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                response.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED.message
                partitions.append(response)
                continue
            try:
                state = ctx.services.replica_manager.leader_partition(topic.name, index).log.producer_state
                response.active_producers = [DescribeProducersResponse.ProducerState(
                    producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                    last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                    current_txn_start_offset=-1 if e.current_txn_first_offset is None
                    else e.current_txn_first_offset) for e in state.producers.values()]
            except Exception as exc:
                response.error_code = error_code_for(exc)
                response.error_message = str(exc)
            partitions.append(response)
        topics.append(DescribeProducersResponse.TopicResponse(name=topic.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


@api(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, request: DescribeTransactionsRequest
                                ) -> DescribeTransactionsResponse:
    service = ctx.services.txns
    states = []
    for transactional_id in request.transactional_ids:
        meta = service.coordinator.describe(transactional_id)
        state = DescribeTransactionsResponse.TransactionState(transactional_id=transactional_id, error_code=0)
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            state.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif service.coordinator_node(transactional_id) not in (None, ctx.services.broker_id):
            state.error_code = ErrorCode.NOT_COORDINATOR
        elif meta is None:
            state.error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        else:
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(meta.partitions):
                by_topic.setdefault(topic, []).append(index)
            state.transaction_state = meta.state.display_name
            state.transaction_timeout_ms = meta.timeout_ms
            state.transaction_start_time_ms = meta.start_ms
            state.producer_id = meta.producer_id
            state.producer_epoch = meta.producer_epoch
            # Kafka lists only the topics the principal may Describe
            describable = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, by_topic)
            state.topics = [DescribeTransactionsResponse.TopicData(topic=t, partitions=p) for t, p in by_topic.items()
                            if t in describable]
        states.append(state)
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)


@api(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def list_transactions(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    """v2's TransactionalIdPattern (KIP-1152) keeps the ids it matches whole; it runs in the broker's regex child
    process (RE2, as the consumer groups' topic regexes), so no pattern can stall the broker; one RE2 refuses is
    INVALID_REGULAR_EXPRESSION (Kafka's java.util.regex also takes backreferences and lookarounds)."""
    unknown = [name for name in request.state_filters if TxnState.from_name(name) is None]
    listed = ctx.services.txns.coordinator.list_transactions(request.state_filters, request.producer_id_filters,
                                                           request.duration_filter, ctx.now_ms)
    pattern = request.transactional_id_pattern
    if pattern:
        regexes = ctx.services.groups.regexes
        if await regexes.invalid_reason(pattern) is not None:
            return ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                                            unknown_state_filters=unknown, transaction_states=[])
        matched = set((await regexes.resolve([pattern], [m.transactional_id for m in listed]))[pattern])
        listed = [m for m in listed if m.transactional_id in matched]
    describable = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                (m.transactional_id for m in listed))
    listed = [m for m in listed if m.transactional_id in describable]  # Kafka lists only these
    return ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                                    transaction_states=[ListTransactionsResponse.TransactionState(
                                        transactional_id=m.transactional_id, producer_id=m.producer_id,
                                        transaction_state=m.state.display_name) for m in listed])
