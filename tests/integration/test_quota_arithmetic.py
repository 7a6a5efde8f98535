"""producer_byte_rate in a few seconds: the throttle time a Produce answer carries is Kafka's, to the
millisecond bound the client can observe (the long measurement of a flooding producer is
test_client_quotas.py's).

Kafka's arithmetic (ClientQuotaManager, Rate over quota.window.num samples of
quota.window.size.seconds, QuotaUtils.throttleTime): each Produce records the request's size
(request.sizeInBytes: the frame after its length prefix, header included); the rate is the sum of the
samples over the window size, the time since the oldest sample started but at least
(quota.window.num - 1) whole windows, so before the tenth second of a fresh sensor the window is
10 s plus the part of the current second gone; a rate O over the bound T is throttled
(O - T) / T x window, i.e. sum / T - window. With 11 windows of 1 s a fresh sensor so takes about ten
seconds' worth at once: that is what let a producer held to 1 MiB/s deliver 1.48 MiB/s over a 12 s
run (tests/unit/server/test_client_quota_manager.py has the envelope)."""

from __future__ import annotations

import time
from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import ProduceRequest, ProduceResponse, RequestHeader
from pybroker.records.record import RecordInput, build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_hostile_clients import create_topic
from tests.integration.test_quota_mute import set_quota

RATE = 1_000  # producer_byte_rate of the WireClient's client id, bytes/s: ten windows hold 10,000 bytes
WINDOWS = 11  # Kafka's default quota.window.num (quota.window.size.seconds = 1)
SMALL = b"s" * 100  # requests where the header is a large part of the size
SMALL_REQUESTS = 40


def produce_request(topic: str, value: bytes) -> ProduceRequest:
    return ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(
            index=0, records=build_batch([RecordInput(None, value)]))])])


def request_size(request: ProduceRequest) -> int:
    """Kafka's request.sizeInBytes for what WireClient sends: the frame without its 4-byte length."""
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1, client_id="wire-test")
    return len(encode_request(header, request, 9)) - 4


def kafka_throttle_ms(total: float, elapsed_ms: int) -> int:
    """QuotaUtils.throttleTime for `total` bytes recorded over `elapsed_ms` since a fresh sensor's first record."""
    full = elapsed_ms // 1000
    window_ms = elapsed_ms + max(0, WINDOWS - 1 - full) * 1000
    return round((total / (window_ms / 1000) - RATE) / RATE * window_ms)


def test_a_produce_throttle_is_kafkas_for_the_request_bytes(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path).start()  # the default 11 windows of 1 s
    try:
        set_quota(broker.bootstrap, RATE)
        client = WireClient(broker.bootstrap)
        create_topic(client, "formula")
        small, big = produce_request("formula", SMALL), produce_request("formula", b"b" * 6_000)
        sent_first = time.monotonic()
        for i in range(SMALL_REQUESTS):  # 40 x ~230 bytes: under ten seconds' worth
            answer = client.request(small, 9, ProduceResponse)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            assert answer.throttle_time_ms == 0, f"request {i} throttled before the bound was passed"
            if i == 0:
                answered_first = time.monotonic()
        sent_last = time.monotonic()
        answer = client.request(big, 9, ProduceResponse)
        answered_last = time.monotonic()
        client.close()
    finally:
        broker.kill()
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    # the broker stamped the first and the last record between these client times
    shortest = int((sent_last - answered_first) * 1000)
    longest = int((answered_last - sent_first) * 1000) + 1
    total = SMALL_REQUESTS * request_size(small) + request_size(big)
    allowed = {kafka_throttle_ms(total, elapsed) for elapsed in range(shortest, longest + 1)}
    assert min(allowed) - 1 <= answer.throttle_time_ms <= max(allowed) + 1, (
        f"throttle {answer.throttle_time_ms} ms; Kafka's formula gives {min(allowed)}..{max(allowed)} ms "
        f"for {total} request bytes over {shortest}..{longest} ms")
    records_only = SMALL_REQUESTS * len(small.topic_data[0].partition_data[0].records) + \
        len(big.topic_data[0].partition_data[0].records)
    counted_records = {kafka_throttle_ms(records_only, elapsed) for elapsed in range(shortest, longest + 1)}
    assert max(counted_records) + 1 < min(allowed), "the test cannot tell request bytes from record bytes"
