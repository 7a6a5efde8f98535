"""KIP-219: a throttled response goes out at once, then the broker reads nothing more from that
connection until the throttle time has passed. A request sent meanwhile stays in the broker's socket
receive queue (seen in /proc/net/tcp), while other clients are answered."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from pybroker.client.cluster import KafkaClient
from pybroker.client.quota_admin import alter_client_quotas
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, ProduceRequest, ProduceResponse
from pybroker.records.record import RecordInput, build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_hostile_clients import api_versions_latency, create_topic, raw_frame

RATE = 10_000  # producer_byte_rate of the WireClient's client id, bytes/s
VALUE = b"m" * 30_000  # one produce three times the rate: about two seconds of throttle with 2 windows of 1 s


def server_receive_queue(broker_port: int, client_port: int) -> int | None:
    """Bytes waiting in the broker's socket of the connection from `client_port` (rx_queue in /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, remote_port = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
        if (local_port, remote_port) == (broker_port, client_port):
            return int(fields[4].split(":")[1], 16)
    return None


def set_quota(bootstrap: str, rate: int = RATE) -> None:
    """producer_byte_rate of the WireClient's client id."""
    async def run() -> None:
        async with KafkaClient(bootstrap) as client:
            assert await alter_client_quotas(client, [({"client-id": "wire-test"},
                                                       {"producer_byte_rate": float(rate)})]) == [None]
    asyncio.run(run())


def test_a_throttled_connection_is_not_read_until_its_throttle_has_passed(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, {"quota.window.num": "2"}).start()
    try:
        set_quota(broker.bootstrap)
        client = WireClient(broker.bootstrap)
        create_topic(client, "muted")
        produced = client.request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name="muted", partition_data=[ProduceRequest.PartitionProduceData(
                index=0, records=build_batch([RecordInput(None, VALUE)]))])]), 9, ProduceResponse)
        answered_at = time.monotonic()
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        throttle_s = produced.throttle_time_ms / 1000
        assert throttle_s > 0.5, produced.throttle_time_ms

        frame = raw_frame(ApiVersionsRequest(), 3, 99)
        client.sock.sendall(frame)
        broker_port, client_port = int(broker.bootstrap.rsplit(":", 1)[1]), client.sock.getsockname()[1]
        deadline = time.monotonic() + 5
        while server_receive_queue(broker_port, client_port) != len(frame):
            assert time.monotonic() < deadline, "the request never reached the broker's socket"
        for _ in range(3):  # the broker's event loop goes round and answers others, muted socket untouched
            assert api_versions_latency(broker.bootstrap) < 5
        still_waiting = server_receive_queue(broker_port, client_port)
        elapsed = time.monotonic() - answered_at
        assert elapsed < throttle_s, "the checks took longer than the throttle: nothing was observed"
        assert still_waiting == len(frame), "the broker read from a muted connection"

        client.sock.settimeout(throttle_s + 10)
        frame_back = client.read_frame()
        assert int.from_bytes(frame_back[:4], "big") == 99
        assert ApiVersionsResponse.decode(frame_back[4:], 3).error_code == ErrorCode.NONE
        assert time.monotonic() - answered_at >= throttle_s * 0.9  # unmuted when the throttle ended, not before
        assert server_receive_queue(broker_port, client_port) == 0
        client.close()
    finally:
        broker.kill()
