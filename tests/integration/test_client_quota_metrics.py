"""Quota sensors on /metrics, named as the JMX exporter renders Kafka's ClientQuotaManager metrics:
``kafka_server_produce_throttle_time{user,client_id}``, ``..._produce_byte_rate``, ``..._fetch_byte_rate``,
``..._request_request_time``, after a throttled produce and a consume by one (user, client-id)."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_client_quotas import alter

LABELS = {"user": "ANONYMOUS", "client_id": "metered"}
COUNT = 120


def scrape(broker: BrokerProcess) -> dict[str, float]:
    """name -> value of the samples labelled with LABELS."""
    port = re.search(r"metrics on http://[^:]+:(\d+)/metrics", broker.log_text())
    assert port is not None
    text = urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5).read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.labels == LABELS}


def scraped_once(broker: BrokerProcess, condition, what: str, timeout: float = 30.0) -> dict[str, float]:
    """The broker's /metrics samples once ``condition`` holds for them."""
    last: list[dict[str, float]] = [{}]

    def met() -> tuple[dict[str, float]] | None:
        last[0] = scrape(broker)
        return (last[0],) if condition(last[0]) else None
    return eventually(met, lambda: f"{what} on /metrics (last seen: {last[0]})", timeout, interval=0.2)[0]


def test_quota_sensors_scraped_after_a_throttled_produce(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, {"metrics.port": "0", "quota.window.size.seconds": "1"}).start()
    try:
        assert alter(broker.bootstrap, [({"user": "ANONYMOUS", "client-id": "metered"},
                                         {"producer_byte_rate": 100_000, "consumer_byte_rate": 10_000_000,
                                          "request_percentage": 500})]) == [None]
        topic = f"metered-{uuid.uuid4().hex[:6]}"
        throttles: list[int] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "metered", "linger.ms": 5,
                             "throttle_cb": lambda event: throttles.append(event.throttle_time)})
        for _ in range(COUNT):  # Kafka's Rate divides by the whole sampled span (10 windows here): 1.2 MB
            producer.produce(topic, b"x" * 10_000)  # measure 120 kB/s, 20% over, a throttle of ~2 s
        assert producer.flush(60) == 0
        assert throttles and max(throttles) > 0
        seen = scraped_once(broker, lambda s: s.get("kafka_server_produce_throttle_time", 0) > 0,
                        "a produce throttle time")
        assert seen["kafka_server_produce_byte_rate"] > 0
        assert seen["kafka_server_request_request_time"] > 0
        assert "kafka_server_request_throttle_time" in seen

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "metered", "group.id": "metered",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        received = 0
        deadline = time.monotonic() + 30
        while received < COUNT and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received += 1
        consumer.close()
        assert received == COUNT
        fetched = scrape(broker)
        assert fetched["kafka_server_fetch_byte_rate"] > 0
        assert fetched["kafka_server_fetch_throttle_time"] == 0
    finally:
        broker.kill()
