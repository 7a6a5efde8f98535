"""Produce (0): authorize, hand the batches to the replica manager, answer.

The checks of each batch (Kafka's LogValidator: framing, max.message.bytes, CRC, then the records
at byte level), the append, the flush.messages wait and the acks=all wait are the replica
manager's (`pybroker.replication.append_records`); this handler adds the broker's own checks of a
valid batch (schema validation, the transaction verification of KIP-890) and turns each outcome
into its answer: what no consumer could read is refused (INVALID_RECORD, CORRUPT_MESSAGE,
MESSAGE_TOO_LARGE); records that break a rule of their topic (no key on a compacted topic, a
timestamp out of message.timestamp.*) are named in `record_errors` (KIP-467) with INVALID_RECORD
or INVALID_TIMESTAMP. acks=0 requests get no response at all; acks=all answers wait until the ISR
holds the batch (or the request's timeout).

A transactional producer's requests are admitted and appended in the order they arrived: one whose
admission waits for the coordinator holds back the producer's later ones to the same partitions
(`TxnService.admissions`), as Kafka, which handles a connection's requests one at a time, would.
"""

from __future__ import annotations

import asyncio
import functools
import types
from typing import Any, Coroutine, Sequence

from pybroker.common.ids import ProducerEpoch, ProducerId
from pybroker.common.topic import INTERNAL_TOPICS, TopicPartition
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.hot_codecs import shared_default
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.protocol.schema import Records
from pybroker.records.batch import RecordBatch
from pybroker.records.constants import BATCH_HEADER, TRANSACTIONAL_FLAG_MASK
from pybroker.records.errors import RecordValidationError
from pybroker.replication.append_records import BeforeAppend, PartitionAppend, RecordsCheck, append_records, \
    unreplicated, wait_for_acks
from pybroker.schema_registry.validation import scan
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server import leader_hints
from pybroker.server.authorization import allowed_names, authorize
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server.quota import enforcement as quota
from pybroker.server.registry import api
from pybroker.server.request_channel import leave_request_queue

PartitionResponse = ProduceResponse.PartitionProduceResponse
# A partition's answer names no leader unless KIP-951's hint replaces the whole field: one shared default rather
# than one built per answer (nothing changes it in place). The answers are built with positional arguments, in
# the generated classes' field order (tests/unit/server/test_answer_layouts.py pins it): on Python 3.11 a keyword
# call to a class builds and unpacks a dict per call.
_NO_LEADER = shared_default(ProduceResponse.LeaderIdAndEpoch)
# Enum members read once, here: on Python 3.11 every attribute read on an Enum class goes through the slot
# EnumType.__getattr__ installs (about 850 instructions against 100 for a global).
_WRITE = AclOperation.WRITE
_TOPIC = ResourceType.TOPIC
_COROUTINE = types.CoroutineType
_Producer = tuple[ProducerId, ProducerEpoch]
_Turn = tuple[tuple[ProducerId, TopicPartition], asyncio.Future[None] | None, asyncio.Future[None]]
FIRST_ZSTD_VERSION = 7
FIRST_TRANSACTION_ABORTABLE_VERSION = 11  # KIP-890: the client handles TRANSACTION_ABORTABLE
FIRST_IMPLICIT_ADD_VERSION = 12  # transactions V2: the coordinator adds the partition to the transaction
FIRST_TOPIC_ID_VERSION = 13
_RETRIED_BY_PRODUCERS = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                         ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                         ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT}


def answer(ctx: RequestContext, request: ProduceRequest
           ) -> ProduceResponse | None | Coroutine[Any, Any, ProduceResponse | None]:
    """The Produce's answer when nothing waits (acks 0 or 1, or acks=all that the ISR already holds: a single
    replica's partitions; batches checked on the loop; no flush.messages; no transaction to admit), else a
    coroutine that waits and then answers: the dispatcher calls this in the connection's read callback, so a
    request answered at once costs no coroutine (`handle` is the same for the quota path). Its batches are
    appended before this returns either way, in the order the connection's requests arrived."""
    if request.transactional_id is not None:  # its admission (KIP-890) waits for the coordinator
        return _transactional(ctx, request)
    names, authorized = _topics(ctx, request)
    slots, batches = _partitions(request, names, authorized, None, {})
    outcome = _append(ctx, request, batches)
    if type(outcome) is _COROUTINE:
        return _answer_appended(ctx, request, names, slots, batches, outcome)
    return _respond(ctx, request, names, slots, batches)


# From v3, as Kafka 4.0 (KIP-896): v0-2 carry message formats v0/v1, which this broker does not write. v12: a
# transactions V2 client, whose partitions the coordinator adds to its transaction; v13: topic ids (KIP-516).
@api(ApiKey.PRODUCE, 3, 13, immediate=answer)
async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    return await _settled(answer(ctx, request))


async def _settled(outcome: ProduceResponse | None | Coroutine[Any, Any, ProduceResponse | None]
                  ) -> ProduceResponse | None:
    """An answer, awaited first if it came as a coroutine (an acks=all wait)."""
    return outcome if outcome is None or isinstance(outcome, ProduceResponse) else await outcome


async def _transactional(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    """A transactional producer's request: Write on the transactional id besides each topic's (Kafka's checks),
    and its batches admitted by the coordinator before they are appended, in the order of the producer's
    requests (`_take_turns`)."""
    assert request.transactional_id is not None
    names, authorized = _topics(ctx, request)
    refused = None if authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id) \
        else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    turns: Sequence[_Turn] = ()
    try:
        not_admitted: dict[TopicPartition, ErrorCode] = {}
        if not refused:
            by_producer, unknown = _transactional_batches(ctx, request, names, authorized)
            turns = _take_turns(ctx, by_producer)  # at arrival: a later request of the producer comes after this one
            not_admitted = await _admit_transactional(ctx, request.transactional_id, by_producer, turns)
            not_admitted.update(dict.fromkeys(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        slots, batches = _partitions(request, names, authorized, refused, not_admitted)
        outcome = _append(ctx, request, batches)
        if type(outcome) is _COROUTINE:
            await outcome
    finally:
        if turns:
            _end_turns(ctx, turns)
    response = _respond(ctx, request, names, slots, batches)
    return await _settled(response)


def _topics(ctx: RequestContext, request: ProduceRequest) -> tuple[list[str | None], set[str]]:
    """The request's topic names in order (None: no topic has its id), and those the client may write to (Kafka's
    check: Write on each topic)."""
    # Loops rather than comprehensions here: each comprehension is a call of its own on Python 3.11.
    names: list[str | None] = []
    known: list[str] = []
    for topic in request.topic_data:
        name = topic.name if ctx.api_version < FIRST_TOPIC_ID_VERSION else _topic_name(ctx, topic)
        names.append(name)
        if name is not None:
            known.append(name)
    return names, set(known) if ctx.services.authorizer is None else allowed_names(ctx, _WRITE, _TOPIC, known)


def _partitions(request: ProduceRequest, names: list[str | None], authorized: set[str], refused: ErrorCode | None,
                not_admitted: dict[TopicPartition, ErrorCode]
                ) -> tuple[list[list[PartitionResponse | PartitionAppend]], list[PartitionAppend]]:
    """Each partition's answer in request order, a refusal now or the outcome of its append to come; and the
    batches to append."""
    slots: list[list[PartitionResponse | PartitionAppend]] = []
    batches = []
    for name, topic in zip(names, request.topic_data):
        of_topic: list[PartitionResponse | PartitionAppend] = []
        slots.append(of_topic)
        if name is None:
            for data in topic.partition_data:
                of_topic.append(_error(data.index, ErrorCode.UNKNOWN_TOPIC_ID, None))
            continue
        code = refused or (None if name in authorized else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        for data in topic.partition_data:
            if code:
                of_topic.append(_error(data.index, code, None))
            elif not_admitted and TopicPartition(name, data.index) in not_admitted:
                of_topic.append(_not_admitted(data.index, name, not_admitted[TopicPartition(name, data.index)]))
            else:
                records = data.records  # _received, inlined: a decoded batch is a buffer (a range only if sent)
                batch = PartitionAppend(name, data.index,
                                        records if isinstance(records, (bytes, bytearray, memoryview)) else None)
                of_topic.append(batch)
                batches.append(batch)
    return slots, batches


def _append(ctx: RequestContext, request: ProduceRequest, batches: list[PartitionAppend]
            ) -> list[PartitionAppend] | Coroutine[Any, Any, list[PartitionAppend]]:
    services = ctx.services
    metrics = services.metrics
    return append_records(
        services.replica_manager, batches, required_acks=request.acks, transactional_id=request.transactional_id,
        allow_zstd=ctx.api_version >= FIRST_ZSTD_VERSION, now_ms=ctx.now_ms,
        before_append=_checks(ctx) if services.schema_validation.topics else None,
        appended=metrics.record_produce if metrics is not None else None, io=services.io)


async def _answer_appended(ctx: RequestContext, request: ProduceRequest, names: list[str | None],
                           slots: list[list[PartitionResponse | PartitionAppend]], batches: list[PartitionAppend],
                           appending: Coroutine[Any, Any, list[PartitionAppend]]) -> ProduceResponse | None:
    """The answer once the appends that wait (a big batch checked off the loop, flush.messages) are done."""
    await appending
    response = _respond(ctx, request, names, slots, batches)
    return await _settled(response)


def _respond(ctx: RequestContext, request: ProduceRequest, names: list[str | None],
             slots: list[list[PartitionResponse | PartitionAppend]], batches: list[PartitionAppend]
             ) -> ProduceResponse | None | Coroutine[Any, Any, ProduceResponse]:
    """After the appends: the quota's count, then no answer (acks=0), or the answer, at once or (acks=all the ISR
    does not hold yet) from a coroutine that waits for it."""
    services = ctx.services
    # producer_byte_rate counts the whole request's bytes, acks=0 included (as Kafka)
    if quota.REQUEST_QUOTA.get() is not None:
        quota.record_produce(request.acks, ctx.request_size, services.clock.wall_ms())
    if request.acks == 0:
        return None
    if request.acks == -1 and (waiting := unreplicated(services.replica_manager, batches)):
        return _answer_replicated(ctx, request, names, slots, waiting)
    return _response(ctx, request, names, slots)


async def _answer_replicated(ctx: RequestContext, request: ProduceRequest, names: list[str | None],
                             slots: list[list[PartitionResponse | PartitionAppend]],
                             waiting: list[PartitionAppend]) -> ProduceResponse:
    """acks=all: the answer once the ISR holds the batches (or the request's timeout)."""
    await wait_for_acks(ctx.services.replica_manager, waiting, request.timeout_ms, leave_request_queue)
    return _response(ctx, request, names, slots)


def _response(ctx: RequestContext, request: ProduceRequest, names: list[str | None],
              slots: list[list[PartitionResponse | PartitionAppend]]) -> ProduceResponse:
    topics = []
    failed = False  # some partition answers an error: KIP-951 may name its leader
    for name, topic, of_topic in zip(names, request.topic_data, slots):
        answers = []
        for slot in of_topic:
            if not isinstance(slot, PartitionAppend):
                answer = slot
            elif slot.error is None and (info := slot.info) is not None:  # _answer's usual case, inlined
                # index, error_code, base_offset, log_append_time_ms, log_start_offset, record_errors,
                # error_message, current_leader
                answer = PartitionResponse(slot.index, 0, info.first_offset, info.log_append_time,
                                           info.log_start_offset, [], None, _NO_LEADER)
            else:
                answer = _answer(slot)
            answers.append(answer)
            if answer.error_code:
                failed = True
        # name, topic_id, partition_responses
        topics.append(ProduceResponse.TopicProduceResponse(name or "", topic.topic_id, answers))
    response = ProduceResponse(topics, 0)  # responses, throttle_time_ms
    if failed and ctx.api_version >= leader_hints.FIRST_PRODUCE_VERSION:
        _point_to_leaders(ctx, names, response)
    return response


def _point_to_leaders(ctx: RequestContext, names: list[str | None], response: ProduceResponse) -> None:
    """KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER names its leader, whose endpoint the answer lists."""
    endpoints: dict[int, ProduceResponse.NodeEndpoint] = {}
    for name, topic in zip(names, response.responses):
        for answer in topic.partition_responses:
            if name is None or answer.error_code not in leader_hints.PRODUCE_ERRORS:
                continue
            hint = leader_hints.leader_hint(ctx.services.metadata, ctx.listener, name, answer.index)
            answer.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=hint.leader_id,
                                                                     leader_epoch=hint.leader_epoch)
            if hint.endpoint is not None:
                endpoints[hint.endpoint.node_id] = ProduceResponse.NodeEndpoint(
                    node_id=hint.endpoint.node_id, host=hint.endpoint.host, port=hint.endpoint.port,
                    rack=hint.endpoint.rack)
    response.node_endpoints = list(endpoints.values())


def _checks(ctx: RequestContext) -> BeforeAppend:
    """The broker's own check of a valid batch: the topic's schema rules (confluent.{key,value}.schema.validation),
    built only while some topic has them. Its records are read where the batch's other record checks run (an I/O
    thread for a big batch), its schema ids looked up in the registry on the loop. A transactional batch's
    admission (KIP-890) was asked of its coordinator before the appends."""
    validation = ctx.services.schema_validation

    def records_check(topic: str, index: int) -> RecordsCheck | None:
        sides = validation.topics.get(topic)
        if sides is None:
            return None
        return lambda batch: functools.partial(scan(sides, batch).judge, validation, topic)

    return records_check


def _received(records: Records | None) -> bytes | bytearray | memoryview | None:
    """A decoded batch: bytes or None (a records field may also be a Spliced file range, but only one sent)."""
    return records if isinstance(records, (bytes, bytearray, memoryview)) else None


def _topic_name(ctx: RequestContext, topic: ProduceRequest.TopicProduceData) -> str | None:
    """The topic's name from its id, as v13+ names topics (None: no topic has that id); up to v12 the handler
    reads the name sent, with no call."""
    info = ctx.services.metadata.topic_by_id(topic.topic_id)
    return None if info is None else info.name


def _transactional_batches(ctx: RequestContext, request: ProduceRequest, names: list[str | None], authorized: set[str]
                           ) -> tuple[dict[_Producer, list[TopicPartition]], list[TopicPartition]]:
    """Per producer id and epoch, the partitions of the request's transactional batches that the coordinator
    has to admit; and those this broker leads but its metadata does not know yet (a LeaderAndIsr comes before
    its UpdateMetadata), which the coordinator would refuse as unknown. The others are answered by their
    partition's own checks (not led here)."""
    metadata = ctx.services.metadata
    replicas = ctx.services.replica_manager
    by_producer: dict[_Producer, list[TopicPartition]] = {}
    unknown: list[TopicPartition] = []
    for name, topic in zip(names, request.topic_data):
        if name is None or name not in authorized or name in INTERNAL_TOPICS:
            continue
        info = metadata.topic(name)
        for data in topic.partition_data:
            records = _received(data.records)
            if records is None or len(records) < BATCH_HEADER.size:
                continue  # refused as invalid
            header = RecordBatch(records).header()
            if not header.attributes & TRANSACTIONAL_FLAG_MASK or header.producer_id < 0:
                continue  # not transactional, or refused as invalid
            if info is not None and data.index in info.partitions:
                producer = ProducerId(header.producer_id), ProducerEpoch(header.producer_epoch)
                by_producer.setdefault(producer, []).append(TopicPartition(info.name, data.index))
            elif (hosted := replicas.hosted(name, data.index)) is not None and hosted.is_leader:
                unknown.append(TopicPartition(name, data.index))
    return by_producer, unknown


def _take_turns(ctx: RequestContext, by_producer: dict[_Producer, list[TopicPartition]]) -> list[_Turn]:
    """This request's turn at each of its producer's partitions, taken when it arrives: the coordinator's
    answer may take a while, and a request of the same producer arriving meanwhile must not be admitted and
    appended before it (its batch would come before this one's sequence numbers: OUT_OF_ORDER_SEQUENCE)."""
    admissions = ctx.services.txns.admissions
    keys = dict.fromkeys((producer_id, partition) for (producer_id, _), partitions in by_producer.items()
                         for partition in partitions)
    return [(key, *admissions.take(key)) for key in keys]


def _end_turns(ctx: RequestContext, turns: Sequence[_Turn]) -> None:
    admissions = ctx.services.txns.admissions
    for key, previous, turn in turns:
        admissions.end(key, previous, turn)


async def _admit_transactional(ctx: RequestContext, transactional_id: str,
                               by_producer: dict[_Producer, list[TopicPartition]],
                               turns: list[_Turn]) -> dict[TopicPartition, ErrorCode]:
    """Once the producer's earlier requests to these partitions are appended, the partitions whose batch the
    coordinator did not admit (TxnService.admit: added for a V2 client, verified for a V1 one), with the code
    each gets; asked once per producer id and epoch."""
    for _, previous, _ in turns:
        if previous is not None and not previous.done():
            await asyncio.shield(previous)  # the earlier request's turn is not this one's to cancel
    not_admitted: dict[TopicPartition, ErrorCode] = {}
    for (producer_id, producer_epoch), partitions in by_producer.items():
        code = await ctx.services.txns.admit(transactional_id, producer_id, producer_epoch, partitions,
                                             implicit=ctx.api_version >= FIRST_IMPLICIT_ADD_VERSION)
        if code is not ErrorCode.NONE:
            not_admitted.update(dict.fromkeys(partitions, _produce_code(code, ctx.api_version)))
    return not_admitted


def _produce_code(code: ErrorCode, version: int) -> ErrorCode:
    """A coordinator's answer to the add or verification, as the producer gets it (Kafka's
    AddPartitionsToTxnManager): a coordinator that is away, loading or ending the transaction is
    NOT_ENOUGH_REPLICAS, which every producer retries; a fenced producer INVALID_PRODUCER_EPOCH; a
    partition not in the transaction TRANSACTION_ABORTABLE from v11, INVALID_TXN_STATE before (KIP-890)."""
    if code in _RETRIED_BY_PRODUCERS:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code is ErrorCode.TRANSACTION_ABORTABLE and version < FIRST_TRANSACTION_ABORTABLE_VERSION:
        return ErrorCode.INVALID_TXN_STATE
    return code


def _not_admitted(index: int, topic: str, code: ErrorCode) -> PartitionResponse:
    return _error(index, code, f"{topic}-{index} is not part of the producer's transaction"
                  if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE) else None)


def _answer(item: PartitionAppend) -> PartitionResponse:
    exc = item.error
    if exc is None:
        assert item.info is not None
        # index, error_code, base_offset, log_append_time_ms, log_start_offset, record_errors, error_message,
        # current_leader
        return PartitionResponse(item.index, 0, item.info.first_offset, item.info.log_append_time,
                                 item.info.log_start_offset, [], None, _NO_LEADER)
    if isinstance(exc, RecordValidationError):
        response = _error(item.index, ErrorCode.INVALID_TIMESTAMP if exc.invalid_timestamp
                          else ErrorCode.INVALID_RECORD, str(exc))
        response.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                                  for i, m in exc.record_errors]
        return response
    return _error(item.index, error_code_for(exc), error_message_for(exc))


def _error(index: int, code: ErrorCode, message: str | None) -> PartitionResponse:
    return PartitionResponse(index, code, -1, -1, -1, [], message, _NO_LEADER)
