"""A big compressed produce batch is checked off the event loop, and appends keep their order.

Decompressing a 1 MB lz4 batch of compressible records (40 MiB of records here) and walking its records takes
the broker tens of milliseconds. Done on the loop (before this change), another connection's ApiVersions
requests, sent one after another while the Produce is outstanding, were answered only while the request's
bytes were being received: 1 or 2 of them in runs here, on either build. On an I/O thread, 96 to 378 (pure
build) and 245 to 1,183 (compiled), 8 once with two test workers on a machine loaded several times over.

A topic with schema validation (confluent.value.schema.validation) has each record decoded and its schema id read:
for a big batch that is done on the I/O thread too, each distinct id then looked up in the registry on the loop.
Read on the loop (before this change), with the id looked up for each record, 40,000 records kept the loop
0.6-1 s (compiled build) or 2-3 s (pure), during which no other client was answered.

A batch checked off the loop must not let a later one overtake it: one connection pipelines a big batch and
then small ones to the same partition; the log holds them in the order they were sent (with the ordering
turned off the small ones are appended first), and an idempotent producer's sequence numbers are checked in
that order too.
"""

from __future__ import annotations

import json
import os
import re
import select
import urllib.request
import struct
from typing import Callable, Iterator

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import RequestHeader, encode_request
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records.batch import RecordBatch, update_crc
from pybroker.records.constants import RECORD_BATCH_OVERHEAD, Compression
from pybroker.records.record import RecordInput, build_batch
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_delete_records import create_topic

PRODUCE_VERSION = 9
MAX_MESSAGE_BYTES = 4 << 20
ANSWERED_WHILE_CHECKING = 6
"""Three times the ApiVersions answered while a big Produce request's bytes are received."""


def big_batch(codec: Compression, **fields: int) -> bytes:
    """40,000 records of 1,008 compressible bytes: 40 MiB of records in 0.5-1.1 MB compressed (more records than
    the loop checks: handed over before anything is decompressed)."""
    return build_batch([RecordInput(b"k%d" % i, os.urandom(8) + b"x" * 1000) for i in range(40_000)],
                       compression=codec, **fields)


def few_large_records(codec: Compression) -> bytes:
    """4,000 records of 10,008 bytes: 40 MiB again, in few enough records that the loop starts decompressing
    them and hands the batch over once past its byte budget."""
    return build_batch([RecordInput(b"k%d" % i, os.urandom(8) + b"x" * 10_000) for i in range(4_000)],
                       compression=codec)


def small_batch(value: bytes, **fields: int) -> bytes:
    return build_batch([RecordInput(b"k", value)], **fields)


def send_produce(client: WireClient, topic: str, batch: bytes, acks: int = 1) -> int:
    """Send without waiting for the answer; its correlation id."""
    client.correlation += 1
    header = RequestHeader(request_api_key=ProduceRequest.API_KEY, request_api_version=PRODUCE_VERSION,
                           correlation_id=client.correlation, client_id="big-batch")
    request = ProduceRequest(acks=acks, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    client.sock.sendall(encode_request(header, request, PRODUCE_VERSION))
    return client.correlation


def produce_answer(client: WireClient, correlation: int) -> ProduceResponse.PartitionProduceResponse:
    frame = client.read_frame()
    assert struct.unpack_from(">i", frame, 0)[0] == correlation  # v9: a flexible header, one tag byte
    return ProduceResponse.decode(frame[5:], PRODUCE_VERSION).responses[0].partition_responses[0]


def produce(client: WireClient, topic: str, batch: bytes) -> ProduceResponse.PartitionProduceResponse:
    return produce_answer(client, send_produce(client, topic, batch))


def answered(client: WireClient) -> bool:
    return bool(client.frames) or bool(select.select([client.sock], [], [], 0)[0])


def answered_while_appended(broker: BrokerProcess, topic: str, batch: bytes, warm_up: bool = False) -> int:
    """The ApiVersions requests another connection has answered, one after another, while the batch was produced
    (``warm_up``: after producing it once first)."""
    producer, other = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
    base_offset = 0
    if warm_up:
        first = produce(producer, topic, batch)
        assert (first.error_code, first.base_offset) == (ErrorCode.NONE, 0), first
        base_offset = RecordBatch(batch).header().records_count
    correlation = send_produce(producer, topic, batch)
    count = 0
    while not answered(producer):
        version = other.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                                ApiVersionsResponse)
        assert version.error_code == ErrorCode.NONE
        count += 1
    answer = produce_answer(producer, correlation)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, base_offset), answer
    producer.close()
    other.close()
    return count


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"message.max.bytes": str(MAX_MESSAGE_BYTES), "schema.registry.listeners": "http://127.0.0.1:0"}
    process = BrokerProcess(tmp_path_factory.mktemp("broker"), overrides).start()
    yield process
    process.kill()


def new_topic(broker: BrokerProcess, name: str, max_message_bytes: int = MAX_MESSAGE_BYTES, **configs: str) -> str:
    create_topic(broker.bootstrap, name, configs={"max.message.bytes": str(max_message_bytes), **configs})
    return name


@pytest.mark.parametrize(("codec", "make"), [(Compression.LZ4, big_batch), (Compression.GZIP, big_batch),
                                             (Compression.ZSTD, big_batch), (Compression.LZ4, few_large_records),
                                             (Compression.GZIP, few_large_records)])
def test_other_clients_are_answered_while_a_big_batch_is_checked(broker: BrokerProcess, codec: Compression,
                                                                 make: Callable[[Compression], bytes]) -> None:
    topic = new_topic(broker, f"big-{codec.name.lower()}-{make.__name__.replace('_', '-')}")
    count = answered_while_appended(broker, topic, make(codec))
    assert count >= ANSWERED_WHILE_CHECKING, f"only {count} ApiVersions answered while the batch was checked"


RECORD_NAME_VALIDATED = {
    "confluent.value.schema.validation": "true",
    "confluent.value.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy"}
SCHEMA = json.dumps({"type": "record", "name": "Reading", "namespace": "iot",
                     "fields": [{"name": "celsius", "type": "double"}]})

ANSWERED_WHILE_READ = 18
"""ApiVersions answered while 40,000 small records are decoded to read their schema ids on a thread: 53-250 here
(either build), 24 in a CI run that shared the machine with callgrind. Read on the loop, with an id looked up for
each record (before this change), 6-11 in 8 runs of 9, while the loop was held 0.6-1 s (compiled) or 2-3 s (pure)."""


def register(broker: BrokerProcess, subject: str, schema: str) -> int:
    """The id the broker's schema registry gives ``schema`` under ``subject``."""
    listening = re.search(r"Schema registry listening on (https?://\S+)", broker.log_text())
    assert listening is not None, "the broker's schema registry did not start"
    request = urllib.request.Request(f"{listening[1]}/subjects/{subject}/versions", method="POST",
                                     data=json.dumps({"schema": schema}).encode(),
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.load(response)["id"])


def test_other_clients_are_answered_while_a_big_batchs_schema_ids_are_read(broker: BrokerProcess) -> None:
    topic = new_topic(broker, "big-schema-validated", **RECORD_NAME_VALIDATED)
    value = b"\0" + register(broker, "iot.Reading", SCHEMA).to_bytes(4, "big") + b"\0" * 8
    # Warmed up: the first big batch also loads what big batches need (numpy in the pure build).
    count = answered_while_appended(broker, topic, build_batch([RecordInput(None, value)] * 40_000), warm_up=True)
    assert count >= ANSWERED_WHILE_READ, f"only {count} ApiVersions answered while the records were read"


def test_a_small_batch_does_not_overtake_a_big_one_sent_before_it(broker: BrokerProcess) -> None:
    topic = new_topic(broker, "in-order")
    client = WireClient(broker.bootstrap)
    sent = [send_produce(client, topic, big_batch(Compression.LZ4)),
            *(send_produce(client, topic, small_batch(b"after-%d" % i)) for i in range(3)),
            send_produce(client, topic, big_batch(Compression.ZSTD)),
            send_produce(client, topic, small_batch(b"last"))]
    answers = [produce_answer(client, correlation) for correlation in sent]
    assert [a.error_code for a in answers] == [ErrorCode.NONE] * len(sent), answers
    assert [a.base_offset for a in answers] == [0, 40_000, 40_001, 40_002, 40_003, 80_003]
    client.close()


def test_an_idempotent_producers_sequences_are_checked_in_the_order_sent(broker: BrokerProcess) -> None:
    topic = new_topic(broker, "idempotent-in-order")
    client = WireClient(broker.bootstrap)
    producer = eventually(lambda: (answer := client.request(InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1), 4,
        InitProducerIdResponse)).error_code == ErrorCode.NONE and answer, "a producer id")
    ids = {"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch}
    sent = [send_produce(client, topic, big_batch(Compression.LZ4, base_sequence=0, **ids), acks=-1),
            send_produce(client, topic, small_batch(b"next", base_sequence=40_000, **ids), acks=-1),
            send_produce(client, topic, small_batch(b"last", base_sequence=40_001, **ids), acks=-1)]
    answers = [produce_answer(client, correlation) for correlation in sent]
    assert [(a.error_code, a.base_offset) for a in answers] == [(ErrorCode.NONE, 0), (ErrorCode.NONE, 40_000),
                                                                (ErrorCode.NONE, 40_001)], answers
    client.close()


def _records_count(batch: bytes, count: int) -> bytes:
    patched = bytearray(batch)
    struct.pack_into(">i", patched, RECORD_BATCH_OVERHEAD - 4, count)
    struct.pack_into(">i", patched, 23, count - 1)  # lastOffsetDelta, as the count says
    update_crc(patched, 0)
    return bytes(patched)


def _truncated_payload(batch: bytes) -> bytes:
    patched = bytearray(batch[:-64])
    struct.pack_into(">i", patched, 8, len(patched) - 12)  # batchLength
    update_crc(patched, 0)
    return bytes(patched)


def test_a_big_batch_checked_off_the_loop_is_refused_with_kafkas_codes(broker: BrokerProcess) -> None:
    topic = new_topic(broker, "big-refused")
    client = WireClient(broker.bootstrap)
    one_record_more = produce(client, topic, _records_count(big_batch(Compression.LZ4), 40_001))
    assert one_record_more.error_code == ErrorCode.INVALID_RECORD, one_record_more
    truncated = produce(client, topic, _truncated_payload(big_batch(Compression.GZIP)))
    assert truncated.error_code == ErrorCode.CORRUPT_MESSAGE, truncated
    # Refused, the batches left their partition's queue: the next append goes through.
    accepted = produce(client, topic, small_batch(b"ok"))
    assert (accepted.error_code, accepted.base_offset) == (ErrorCode.NONE, 0), accepted
    # 80,000 records of 1 KiB: 80 MiB, past the 64 MiB a batch may decompress to (max.message.bytes 1 MiB).
    bombed = new_topic(broker, "big-bomb", 1 << 20)
    bomb = build_batch([RecordInput(None, b"\0" * 1024)] * 80_000, compression=Compression.ZSTD)
    assert produce(client, bombed, bomb).error_code == ErrorCode.MESSAGE_TOO_LARGE
    client.close()
