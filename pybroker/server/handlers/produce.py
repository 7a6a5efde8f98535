"""Produce (0): validate one v2 batch per partition as Kafka's LogValidator does, then append it.

The header and CRC are checked first; then the records are walked once at byte level
(`pybroker.records.validation`: no Record objects), after decompressing them when compressed,
as Kafka does, with a bound on the output against compression bombs. What no consumer could
read is refused (INVALID_RECORD, CORRUPT_MESSAGE, RECORD_TOO_LARGE); records that break a
rule of their topic (no key on a compacted topic, a timestamp out of message.timestamp.*) are
named in `record_errors` (KIP-467) with INVALID_RECORD or INVALID_TIMESTAMP. The header's
maxTimestamp is the records' own, as Kafka rewrites it. acks=0 requests get no response at
all; acks=all answers wait until the ISR holds the batch (or the request's timeout).
"""

from __future__ import annotations

import asyncio
import time

from pybroker.common.topic import INTERNAL_TOPICS
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.records.batch import Compression, RecordBatch, TimestampType, set_max_timestamp, validate_batch
from pybroker.records.constants import BATCH_HEADER, COMPRESSION_CODEC_MASK, LOG_OVERHEAD, TRANSACTIONAL_FLAG_MASK
from pybroker.records.errors import InvalidRecordError, RecordValidationError, UnsupportedCompressionError
from pybroker.records.validation import validate_produced_batch
from pybroker.replication.errors import NotEnoughReplicasAfterAppendError, ReplicaTimeoutError
from pybroker.server.context import RequestContext
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server.network import leave_request_queue
from pybroker.server.quota import enforcement as quota
from pybroker.server.registry import api

PartitionResponse = ProduceResponse.PartitionProduceResponse
FIRST_ZSTD_VERSION = 7
FIRST_IMPLICIT_ADD_VERSION = 12  # transactions V2: the coordinator adds the partition to the transaction
FIRST_TOPIC_ID_VERSION = 13
_RETRIED_BY_PRODUCERS = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                         ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                         ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT}


# From v3, as Kafka 4.0 (KIP-896): v0-2 carry message formats v0/v1, which this broker does not write. v12: a
# transactions V2 client, whose partitions the coordinator adds to its transaction; v13: topic ids (KIP-516).
@api(ApiKey.PRODUCE, 3, 13)
async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    responses = []
    replicating: dict[tuple[str, int], int] = {}
    names = [_topic_name(ctx, topic) for topic in request.topic_data]
    # Kafka's checks: Write on the transactional id for the whole request, Write on each topic.
    authorized = allowed_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, (n for n in names if n is not None))
    refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if request.transactional_id is not None and not \
        authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id) else None
    not_admitted = {} if refused else await _admit_transactional(ctx, request, names, authorized)
    for name, topic in zip(names, request.topic_data):
        if name is None:
            partitions = [_error(data.index, ErrorCode.UNKNOWN_TOPIC_ID, None) for data in topic.partition_data]
        else:
            code = refused or (None if name in authorized else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            partitions = [_error(data.index, code, None) if code else
                          _not_admitted(data.index, name, not_admitted[(name, data.index)])
                          if (name, data.index) in not_admitted else
                          _produce_partition(ctx, request, name, data, replicating) for data in topic.partition_data]
        responses.append(ProduceResponse.TopicProduceResponse(name=name or "", topic_id=topic.topic_id,
                                                              partition_responses=partitions))
    # flush.messages: as Kafka's synchronous flush, answer once the appended offsets are fsynced (off the loop).
    if ctx.broker.log_manager.flushing:
        unflushed = await ctx.broker.log_manager.wait_flushed(
            (topic.name, partition.index) for topic in responses for partition in topic.partition_responses
            if partition.error_code == ErrorCode.NONE)
        for topic in responses:
            topic.partition_responses = [
                _error(p.index, ErrorCode.KAFKA_STORAGE_ERROR, f"Flush of {topic.name}-{p.index} failed")
                if (topic.name, p.index) in unflushed else p for p in topic.partition_responses]
    if quota.active():  # producer_byte_rate counts the whole request's bytes, acks=0 included (as Kafka)
        quota.record_produce(request.acks, ctx.request_size, int(time.time() * 1000))
    if request.acks == 0:
        return None
    if replicating:
        # acks=all: hold the answer until the ISR has every appended batch (Kafka's delayed produce). Partitions
        # already replicated (a single replica, or followers ahead) are answered without waiting, as Kafka's
        # delayed produce completes at once when it can.
        failed, waiting = _replication_state(ctx, replicating)
        if waiting:
            await _await_replication(ctx, request.timeout_ms, replicating, waiting, failed)
        if failed:
            _answer_replication_failures(responses, failed)
    return ProduceResponse(responses=responses, throttle_time_ms=0)


def _topic_name(ctx: RequestContext, topic: ProduceRequest.TopicProduceData) -> str | None:
    """The topic's name: as sent up to v12, from its id from v13 (None: no topic has that id)."""
    if ctx.api_version < FIRST_TOPIC_ID_VERSION:
        return topic.name
    info = ctx.broker.metadata.topic_by_id(topic.topic_id)
    return None if info is None else info.name


async def _admit_transactional(ctx: RequestContext, request: ProduceRequest, names: list[str | None],
                               authorized: set[str]) -> dict[tuple[str, int], ErrorCode]:
    """The partitions whose transactional batch the coordinator did not admit (TxnService.admit: added for a
    V2 client, verified for a V1 one), with the code each gets; asked once per producer id and epoch."""
    if request.transactional_id is None:
        return {}
    metadata = ctx.broker.metadata
    by_producer: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for name, topic in zip(names, request.topic_data):
        info = None if name is None or name not in authorized or name in INTERNAL_TOPICS else metadata.topic(name)
        for data in topic.partition_data if info is not None else ():
            records = data.records
            if data.index not in info.partitions or records is None or len(records) < BATCH_HEADER.size:
                continue  # answered by the partition's own checks
            header = RecordBatch(records).header()
            if header.attributes & TRANSACTIONAL_FLAG_MASK and header.producer_id >= 0:  # else refused as invalid
                by_producer.setdefault((header.producer_id, header.producer_epoch), []).append((name, data.index))
    not_admitted: dict[tuple[str, int], ErrorCode] = {}
    for (producer_id, producer_epoch), partitions in by_producer.items():
        code = await ctx.broker.txns.admit(request.transactional_id, producer_id, producer_epoch, partitions,
                                           implicit=ctx.api_version >= FIRST_IMPLICIT_ADD_VERSION)
        if code is not ErrorCode.NONE:
            not_admitted.update(dict.fromkeys(partitions, _produce_code(code)))
    return not_admitted


def _produce_code(code: ErrorCode) -> ErrorCode:
    """A coordinator's answer to the add or verification, as the producer gets it (Kafka's
    AddPartitionsToTxnManager): a coordinator that is away, loading or ending the transaction is
    NOT_ENOUGH_REPLICAS, which every producer retries; a fenced producer INVALID_PRODUCER_EPOCH."""
    if code in _RETRIED_BY_PRODUCERS:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def _not_admitted(index: int, topic: str, code: ErrorCode) -> PartitionResponse:
    return _error(index, code, f"{topic}-{index} is not part of the producer's transaction"
                  if code is ErrorCode.INVALID_TXN_STATE else None)


def _replication_state(ctx: RequestContext, replicating: dict[tuple[str, int], int]
                       ) -> tuple[dict[tuple[str, int], Exception], list[tuple[str, int]]]:
    """The partitions whose append cannot be acknowledged (and why), and those still waiting for the ISR."""
    manager = ctx.broker.replica_manager
    failed: dict[tuple[str, int], Exception] = {}
    waiting: list[tuple[str, int]] = []
    for key, offset in replicating.items():
        try:
            if not manager.replicated(*key, offset):
                waiting.append(key)
        except Exception as exc:  # noqa: BLE001 - answered as that partition's error, as after a wait
            failed[key] = exc
    return failed, waiting


async def _await_replication(ctx: RequestContext, timeout_ms: int, replicating: dict[tuple[str, int], int],
                             waiting: list[tuple[str, int]], failed: dict[tuple[str, int], Exception]) -> None:
    """Wait for the high watermark of each `waiting` partition to pass its append; failures go to `failed`."""
    manager = ctx.broker.replica_manager
    leave_request_queue()
    outcomes = await asyncio.gather(*(
        manager.wait_for_high_watermark(topic, index, replicating[(topic, index)], timeout_ms / 1000)
        for topic, index in waiting), return_exceptions=True)
    failed.update((key, outcome) for key, outcome in zip(waiting, outcomes) if isinstance(outcome, Exception))


def _answer_replication_failures(responses: list[ProduceResponse.TopicProduceResponse],
                                 failed: dict[tuple[str, int], Exception]) -> None:
    """Each failed partition's answer becomes its replication error."""
    for topic in responses:
        for i, partition in enumerate(topic.partition_responses):
            exc = failed.get((topic.name, partition.index))
            if exc is not None:
                topic.partition_responses[i] = _error(partition.index, _replication_error_code(exc), str(exc))


def _replication_error_code(exc: Exception) -> ErrorCode:
    if isinstance(exc, NotEnoughReplicasAfterAppendError):
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    if isinstance(exc, ReplicaTimeoutError):
        return ErrorCode.REQUEST_TIMED_OUT
    return error_code_for(exc)


def _produce_partition(ctx: RequestContext, request: ProduceRequest, topic: str,
                       data: ProduceRequest.PartitionProduceData,
                       replicating: dict[tuple[str, int], int]) -> PartitionResponse:
    if request.acks not in (0, 1, -1):
        return _error(data.index, ErrorCode.INVALID_REQUIRED_ACKS, None)
    if topic in INTERNAL_TOPICS:  # Kafka's appendToLocalLog for clients: only coordinators write these
        return _error(data.index, ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}")
    try:
        replica_manager = ctx.broker.replica_manager
        partition = replica_manager.leader_partition(topic, data.index)
        records = data.records
        if records is None or len(records) == 0:
            raise InvalidRecordError("Produce request's partition data carries no record batch")
        config = partition.log.config
        batch = validate_batch(records, 0, max_size=config.max_message_bytes, check_counts=False)
        header = batch.header()  # one unpack for every field read below
        if header.batch_length + LOG_OVERHEAD != len(records):
            raise InvalidRecordError("Produce requests v3+ must carry exactly one record batch per partition")
        if header.attributes & COMPRESSION_CODEC_MASK == Compression.ZSTD and ctx.api_version < FIRST_ZSTD_VERSION:
            raise UnsupportedCompressionError("zstd compression needs Produce v7 or later")
        transactional = bool(header.attributes & TRANSACTIONAL_FLAG_MASK)
        if transactional and request.transactional_id is None:
            return _error(data.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)
        max_timestamp = validate_produced_batch(batch, config.produce_policy, ctx.now_ms, f"{topic}-{data.index}",
                                                header)
        schema_rules = ctx.broker.schema_validation.topics.get(topic)
        if schema_rules is not None:  # confluent.{key,value}.schema.validation=true
            ctx.broker.schema_validation.check(topic, schema_rules, batch)
        appended = bytearray(records)
        if not config.log_append_time:  # Kafka's setMaxTimestamp: the records', not the producer's claim
            set_max_timestamp(appended, 0, TimestampType.CREATE_TIME, max_timestamp)
        info = replica_manager.append_to(partition, appended, required_acks=request.acks, now_ms=ctx.now_ms)
        if ctx.broker.metrics is not None:
            ctx.broker.metrics.record_produce(topic, len(records), header.records_count)
    except RecordValidationError as exc:
        response = _error(data.index, ErrorCode.INVALID_TIMESTAMP if exc.invalid_timestamp
                          else ErrorCode.INVALID_RECORD, str(exc))
        response.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                                  for i, m in exc.record_errors]
        return response
    except InvalidRecordError as exc:
        return _error(data.index, ErrorCode.INVALID_RECORD, str(exc))
    except Exception as exc:
        return _error(data.index, error_code_for(exc), error_message_for(exc))
    if request.acks == -1:
        replicating[(topic, data.index)] = info.last_offset + 1
    return PartitionResponse(index=data.index, error_code=0, base_offset=info.first_offset,
                             log_append_time_ms=info.log_append_time, log_start_offset=info.log_start_offset)


def _error(index: int, code: ErrorCode, message: str | None) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=code, base_offset=-1, error_message=message)
