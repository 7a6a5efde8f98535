"""Client telemetry (KIP-714) on a real broker: client-metrics subscriptions through IncrementalAlterConfigs,
librdkafka (confluent-kafka) pushing its metrics once a subscription matches it, those metrics on /metrics
with client labels, and Kafka's answers to raw GetTelemetrySubscriptions/PushTelemetry requests."""

from __future__ import annotations

import gzip
import re
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_metrics import METRICS_URL, scrape

CLIENT_METRICS = 16
SET, DELETE = 0, 1
GZIP, ZSTD, LZ4, SNAPPY = 1, 4, 3, 2
MAX_BYTES = 4096
ZERO = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("telemetry"),
                            {"metrics.port": "0", "telemetry.max.bytes": str(MAX_BYTES)}).start()
    yield process
    process.kill()


@pytest.fixture
def wire(broker: BrokerProcess) -> Iterator[WireClient]:
    client = WireClient(broker.bootstrap)
    yield client
    client.close()


def alter(wire: WireClient, name: str, configs: dict[str, str | None], validate_only: bool = False
          ) -> tuple[int, str | None]:
    ops = [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=DELETE if v is None else SET, value=v)
           for k, v in configs.items()]
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=CLIENT_METRICS, resource_name=name, configs=ops)], validate_only=validate_only)
    [result] = wire.request(request, 1, IncrementalAlterConfigsResponse).responses
    return result.error_code, result.error_message


def subscribe(wire: WireClient) -> GetTelemetrySubscriptionsResponse:
    answer = wire.request(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO), 0,
                          GetTelemetrySubscriptionsResponse)
    assert answer.error_code == ErrorCode.NONE
    return answer


def push(wire: WireClient, instance: uuid.UUID, subscription: int, payload: bytes = b"", compression: int = 0,
         terminating: bool = False) -> int:
    request = PushTelemetryRequest(client_instance_id=instance, subscription_id=subscription, terminating=terminating,
                                   compression_type=compression, metrics=payload)
    return wire.request(request, 0, PushTelemetryResponse).error_code


def gauge_payload(name: str, value: float) -> bytes:
    data = MetricsData()
    metric = data.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = name
    point = metric.gauge.data_points.add()
    point.as_double = value
    attribute = point.attributes.add()
    attribute.key, attribute.value.string_value = "node.id", "7"
    return data.SerializeToString()


def test_subscription_configs_are_validated_described_and_listed(wire: WireClient) -> None:
    assert alter(wire, "bad-interval", {"interval.ms": "50"}) == (
        ErrorCode.INVALID_REQUEST, "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)")
    assert alter(wire, "bad-key", {"color": "blue"}) == (
        ErrorCode.INVALID_REQUEST, "Unknown client metrics configuration: color")
    assert alter(wire, "bad-match", {"match": "client_color=red"}) == (
        ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: client_color=red")
    assert alter(wire, "", {"metrics": "*"})[0] == ErrorCode.INVALID_REQUEST
    assert alter(wire, "validated", {"metrics": "*"}, validate_only=True) == (ErrorCode.NONE, None)

    assert alter(wire, "listed", {"metrics": "org.apache.kafka.producer.", "interval.ms": "2000",
                                  "match": "client_id=nobody-.*"}) == (ErrorCode.NONE, None)
    described = wire.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=CLIENT_METRICS, resource_name="listed", configuration_keys=None)]), 4, DescribeConfigsResponse)
    [result] = described.results
    assert result.error_code == ErrorCode.NONE
    assert {c.name: c.value for c in result.configs} == {
        "metrics": "org.apache.kafka.producer.", "interval.ms": "2000", "match": "client_id=nobody-.*"}
    names = {r.resource_name for r in wire.request(ListConfigResourcesRequest(), 0,
                                                   ListConfigResourcesResponse).config_resources}
    assert "listed" in names and "validated" not in names and "bad-key" not in names

    assert alter(wire, "listed", {"metrics": None, "interval.ms": None, "match": None}) == (ErrorCode.NONE, None)
    names = {r.resource_name for r in wire.request(ListConfigResourcesRequest(), 0,
                                                   ListConfigResourcesResponse).config_resources}
    assert "listed" not in names


def test_get_and_push_answer_as_kafka_does(wire: WireClient) -> None:
    assert alter(wire, "wire-clients", {"metrics": "org.apache.kafka.wire.", "interval.ms": "60000",
                                        "match": "client_id=wire-.*"}) == (ErrorCode.NONE, None)
    first = subscribe(wire)
    assert first.client_instance_id != ZERO
    assert list(first.accepted_compression_types) == [ZSTD, LZ4, GZIP, SNAPPY]
    assert (first.push_interval_ms, first.telemetry_max_bytes, first.delta_temporality) == (60000, MAX_BYTES, True)
    assert list(first.requested_metrics) == ["org.apache.kafka.wire."]
    instance, subscription = first.client_instance_id, first.subscription_id

    # Asked again before the push interval: throttled.
    again = wire.request(GetTelemetrySubscriptionsRequest(client_instance_id=instance), 0,
                         GetTelemetrySubscriptionsResponse)
    assert again.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED

    assert push(wire, ZERO, subscription) == ErrorCode.INVALID_REQUEST
    assert push(wire, uuid.uuid4(), 12345) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    payload = gzip.compress(gauge_payload("org.apache.kafka.wire.latency", 4.5))
    assert push(wire, instance, subscription, payload, GZIP) == ErrorCode.NONE  # right after Get: accepted
    assert push(wire, instance, subscription, payload, GZIP) == ErrorCode.THROTTLING_QUOTA_EXCEEDED

    # A subscription change re-matches the instance: its old subscription id is refused, a new Get answers.
    assert alter(wire, "wire-clients", {"interval.ms": "30000"}) == (ErrorCode.NONE, None)
    assert push(wire, instance, subscription, payload, GZIP) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    renewed = wire.request(GetTelemetrySubscriptionsRequest(client_instance_id=instance), 0,
                           GetTelemetrySubscriptionsResponse)
    assert renewed.error_code == ErrorCode.NONE and renewed.push_interval_ms == 30000
    assert renewed.subscription_id != subscription and renewed.client_instance_id == instance

    # A terminating push is accepted inside the interval; nothing is accepted after it.
    assert push(wire, instance, renewed.subscription_id, payload, GZIP, terminating=True) == ErrorCode.NONE
    assert push(wire, instance, renewed.subscription_id, payload, GZIP) == ErrorCode.INVALID_REQUEST


def test_payload_refusals(wire: WireClient) -> None:
    def fresh() -> tuple[uuid.UUID, int]:
        answer = subscribe(wire)
        return answer.client_instance_id, answer.subscription_id

    assert push(wire, *fresh(), b"\x01" * (MAX_BYTES + 1)) == ErrorCode.TELEMETRY_TOO_LARGE
    bomb = gzip.compress(gauge_payload("x" * (MAX_BYTES * 4), 1.0))
    assert len(bomb) < MAX_BYTES
    assert push(wire, *fresh(), bomb, GZIP) == ErrorCode.TELEMETRY_TOO_LARGE  # bounded while inflating
    assert push(wire, *fresh(), b"\xff\xff\xff", 0) == ErrorCode.INVALID_RECORD
    assert push(wire, *fresh(), b"not gzip", GZIP) == ErrorCode.INVALID_RECORD
    assert push(wire, *fresh(), b"", 9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_raw_push_reaches_prometheus_with_client_labels(broker: BrokerProcess, wire: WireClient) -> None:
    url = METRICS_URL.search(broker.log_text()).group(1)  # type: ignore[union-attr]
    assert alter(wire, "wire-gauges", {"metrics": "*", "interval.ms": "100", "match": "client_id=wire-test"}) \
        == (ErrorCode.NONE, None)
    answer = subscribe(wire)
    assert push(wire, answer.client_instance_id, answer.subscription_id,
                gauge_payload("org.apache.kafka.wire.gauge", 2.5)) == ErrorCode.NONE
    labels = (("client_id", "wire-test"), ("client_instance_id", str(answer.client_instance_id)),
              ("client_software_name", ""), ("client_software_version", ""), ("node_id", "7"))
    assert scrape(url)[("org_apache_kafka_wire_gauge", labels)] == 2.5
    assert alter(wire, "wire-gauges", {"metrics": None, "interval.ms": None, "match": None}) == (ErrorCode.NONE, None)


def test_librdkafka_pushes_its_metrics_to_prometheus(broker: BrokerProcess, wire: WireClient) -> None:
    url = METRICS_URL.search(broker.log_text()).group(1)  # type: ignore[union-attr]
    assert alter(wire, "producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000",
                                     "match": "client_id=telemetry-producer"}) == (ErrorCode.NONE, None)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "telemetry-producer",
                         "enable.metrics.push": True})

    def pushed() -> dict[str, dict[str, str]] | None:
        producer.produce("telemetry-traffic", b"v")
        producer.poll(0)
        series = {name: dict(labels) for name, labels in scrape(url)
                  if name.startswith("org_apache_kafka_producer") and ("client_id", "telemetry-producer") in labels}
        return series if "org_apache_kafka_producer_node_request_latency_avg" in series else None

    try:
        series = eventually(pushed, "librdkafka's producer metrics on /metrics", timeout=30)
    finally:
        producer.flush(10)
    assert "org_apache_kafka_producer_connection_creation_total" in series  # a counter, not "_total_total"
    labels = series["org_apache_kafka_producer_node_request_latency_avg"]
    assert re.fullmatch(r"[0-9a-f-]{36}", labels["client_instance_id"])
    assert labels["client_software_name"] and labels["client_software_version"]
    assert not any(name.startswith("org_apache_kafka_consumer") for name in series)
