"""Produce (0): validate one v2 batch per partition by its header and CRC, then append it.

The records inside a batch are never decoded here: the CRC covers them, offsets and the leader
epoch are stamped into the header in place. The one exception is Kafka's rule for compacted
topics: every record needs a key, so only there the batch's keys are read. acks=0 requests get
no response at all.
"""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.records.batch import Compression, validate_batch
from pybroker.records.errors import CorruptRecordError, UnsupportedCompressionError
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server.registry import api

PartitionResponse = ProduceResponse.PartitionProduceResponse
FIRST_BATCH_V2_VERSION = 3
FIRST_ZSTD_VERSION = 7


class InvalidRecordError(CorruptRecordError):
    """The request's records break a rule of the Produce API rather than of the batch format."""


@api(ApiKey.PRODUCE, 0, 11)
async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    responses = []
    for topic in request.topic_data:
        partitions = [_produce_partition(ctx, request, topic.name, data) for data in topic.partition_data]
        responses.append(ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions))
    if request.acks == 0:
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)


def _produce_partition(ctx: RequestContext, request: ProduceRequest, topic: str,
                       data: ProduceRequest.PartitionProduceData) -> PartitionResponse:
    if ctx.api_version < FIRST_BATCH_V2_VERSION:
        return _error(data.index, ErrorCode.UNSUPPORTED_VERSION, "Produce v0-2 (message format v0/v1) is not supported")
    if request.acks not in (0, 1, -1):
        return _error(data.index, ErrorCode.INVALID_REQUIRED_ACKS, None)
    try:
        partition = ctx.broker.replica_manager.leader_partition(topic, data.index)
        records = data.records
        if records is None or len(records) == 0:
            raise InvalidRecordError("Produce request's partition data carries no record batch")
        batch = validate_batch(records, 0, max_size=partition.log.config.max_message_bytes)
        if batch.size != len(records):
            raise InvalidRecordError("Produce requests v3+ must carry exactly one record batch per partition")
        if batch.is_control:
            raise InvalidRecordError("Clients may not produce control batches")
        if batch.compression == Compression.ZSTD and ctx.api_version < FIRST_ZSTD_VERSION:
            raise UnsupportedCompressionError("zstd compression needs Produce v7 or later")
        if partition.log.config.compact_enabled and any(record.key is None for record in batch.records()):
            raise InvalidRecordError(f"Compacted topic cannot accept message without key in topic partition "
                                     f"{topic}-{data.index}.")
        info = ctx.broker.replica_manager.append(topic, data.index, bytearray(records),
                                                 required_acks=request.acks, now_ms=ctx.now_ms)
    except InvalidRecordError as exc:
        return _error(data.index, ErrorCode.INVALID_RECORD, str(exc))
    except Exception as exc:
        return _error(data.index, error_code_for(exc), error_message_for(exc))
    return PartitionResponse(index=data.index, error_code=0, base_offset=info.first_offset,
                             log_append_time_ms=info.log_append_time, log_start_offset=info.log_start_offset)


def _error(index: int, code: ErrorCode, message: str | None) -> PartitionResponse:
    return PartitionResponse(index=index, error_code=code, base_offset=-1, error_message=message)
