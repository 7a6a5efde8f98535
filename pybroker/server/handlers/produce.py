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
"""

from __future__ import annotations

import time

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.records.batch import BatchHeader, RecordBatch
from pybroker.records.constants import TRANSACTIONAL_FLAG_MASK
from pybroker.records.errors import RecordValidationError
from pybroker.replication.append_records import BeforeAppend, PartitionAppend, append_records, wait_for_acks
from pybroker.replication.errors import InvalidTxnStateError
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server.quota import enforcement as quota
from pybroker.server.registry import api
from pybroker.server.request_channel import leave_request_queue

PartitionResponse = ProduceResponse.PartitionProduceResponse
FIRST_ZSTD_VERSION = 7


# From v3, as Kafka 4.0 (KIP-896): v0-2 carry message formats v0/v1, which this broker does not write.
@api(ApiKey.PRODUCE, 3, 11)
async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    services = ctx.services
    # Kafka's checks: Write on the transactional id for the whole request, Write on each topic.
    authorized = allowed_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in request.topic_data))
    refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if request.transactional_id is not None and not \
        authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id) else None
    # Each partition's answer in request order: a refusal now, or the outcome of its append.
    slots: list[list[PartitionResponse | PartitionAppend]] = []
    batches = []
    for topic in request.topic_data:
        code = refused or (None if topic.name in authorized else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        slots.append([_error(data.index, code, None) if code else PartitionAppend(topic.name, data.index, data.records)
                      for data in topic.partition_data])
        batches += [slot for slot in slots[-1] if isinstance(slot, PartitionAppend)]
    metrics = services.metrics
    results = await append_records(
        services.replica_manager, batches, required_acks=request.acks, transactional_id=request.transactional_id,
        allow_zstd=ctx.api_version >= FIRST_ZSTD_VERSION, now_ms=ctx.now_ms,
        before_append=_checks(ctx, request.transactional_id),
        appended=metrics.record_produce if metrics is not None else None)
    if quota.active():  # producer_byte_rate counts the whole request's bytes, acks=0 included (as Kafka)
        quota.record_produce(request.acks, ctx.request_size, int(time.time() * 1000))
    if request.acks == 0:
        return None
    if request.acks == -1:
        await wait_for_acks(services.replica_manager, results, request.timeout_ms, leave_request_queue)
    return ProduceResponse(responses=[
        ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=[
            _answer(slot) if isinstance(slot, PartitionAppend) else slot for slot in of_topic])
        for topic, of_topic in zip(request.topic_data, slots)], throttle_time_ms=0)


def _checks(ctx: RequestContext, transactional_id: str | None) -> BeforeAppend:
    """The broker's own checks of a valid batch: the topic's schema rules (confluent.{key,value}.schema.validation)
    and, for a transactional batch, that the producer's transaction holds the partition (KIP-890)."""
    services = ctx.services

    def check(topic: str, index: int, batch: RecordBatch, header: BatchHeader) -> None:
        schema_rules = services.schema_validation.topics.get(topic)
        if schema_rules is not None:
            services.schema_validation.check(topic, schema_rules, batch)
        if header.attributes & TRANSACTIONAL_FLAG_MASK:
            code = services.txns.verify_partition(transactional_id, header.producer_id, header.producer_epoch,
                                                  (topic, index))
            if code is not ErrorCode.NONE:
                raise InvalidTxnStateError(f"{topic}-{index} is not part of the producer's transaction")

    return check


def _answer(item: PartitionAppend) -> PartitionResponse:
    exc = item.error
    if exc is None:
        assert item.info is not None
        return PartitionResponse(index=item.index, error_code=0, base_offset=item.info.first_offset,
                                 log_append_time_ms=item.info.log_append_time,
                                 log_start_offset=item.info.log_start_offset)
    if isinstance(exc, RecordValidationError):
        response = _error(item.index, ErrorCode.INVALID_TIMESTAMP if exc.invalid_timestamp
                          else ErrorCode.INVALID_RECORD, str(exc))
        response.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                                  for i, m in exc.record_errors]
        return response
    return _error(item.index, error_code_for(exc), error_message_for(exc))


def _error(index: int, code: ErrorCode, message: str | None) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=code, base_offset=-1, error_message=message)
