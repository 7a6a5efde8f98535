"""`/metrics` of a real broker after confluent-kafka traffic: counters move by exactly what was sent."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess

METRICS_URL = re.compile(r"Prometheus metrics on (http://\S+/metrics)")
TOPIC = "metered"
MESSAGES = 500
VALUE = b"v" * 100


@pytest.fixture
def metered_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path, {"metrics.port": "0"}).start()
    yield process
    process.kill()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_counters_follow_produce_and_fetch(metered_broker: BrokerProcess) -> None:
    url = METRICS_URL.search(metered_broker.log_text()).group(1)  # type: ignore[union-attr]
    admin = AdminClient({"bootstrap.servers": metered_broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(timeout=30)
    before = scrape(url)
    topic = (("topic", TOPIC),)
    assert ("kafka_server_brokertopicmetrics_bytesin_total", topic) not in before

    producer = Producer({"bootstrap.servers": metered_broker.bootstrap, "compression.type": "none", "linger.ms": 5})
    for i in range(MESSAGES):
        producer.produce(TOPIC, key=b"%04d" % i, value=VALUE)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": metered_broker.bootstrap, "group.id": "metered-readers",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    received = 0
    while True:
        message = consumer.poll(10)
        assert message is not None, "consumer timed out"
        if message.error():
            break
        received += 1
    consumer.close()
    assert received == MESSAGES

    after = scrape(url)
    # Every appended byte is in the partition's only segment, and the consumer read each batch once.
    log_bytes = (metered_broker.data_dir / "logs" / f"{TOPIC}-0" / "00000000000000000000.log").stat().st_size
    assert after[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == MESSAGES
    assert after[("kafka_server_brokertopicmetrics_bytesin_total", topic)] == log_bytes
    assert after[("kafka_server_brokertopicmetrics_bytesout_total", topic)] == log_bytes
    def requests(scraped: dict, request: str) -> float:  # over the API's versions (the version label, KIP-272)
        return sum(value for (name, labels), value in scraped.items()
                   if name == "kafka_network_requestmetrics_requests_total" and dict(labels)["request"] == request)

    for request in ("Produce", "Fetch", "Metadata", "CreateTopics"):
        count = requests(after, request)
        assert count >= 1
        assert after[("kafka_network_requestmetrics_totaltime_seconds_count", (("request", request),))] == count
    assert requests(after, "CreateTopics") == requests(before, "CreateTopics")
    produce_versions = {dict(labels)["version"] for (name, labels), _ in after.items()
                        if name == "kafka_network_requestmetrics_requests_total" and dict(labels)["request"] == "Produce"}
    assert produce_versions and all(version.isdigit() for version in produce_versions)
    assert after[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert after[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert after[("kafka_coordinator_group_groupmetadatamanager_numgroups", ())] == 0
    assert after[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 0
    assert after[("kafka_server_replicamanager_leadercount", ())] \
        == after[("kafka_server_replicamanager_partitioncount", ())] >= 1

    admin.delete_topics([TOPIC])[TOPIC].result(timeout=30)
    eventually(lambda: ("kafka_server_brokertopicmetrics_bytesin_total", topic) not in scrape(url),
               "the deleted topic's series to go")


def test_only_metrics_path_is_served(metered_broker: BrokerProcess) -> None:
    url = METRICS_URL.search(metered_broker.log_text()).group(1)  # type: ignore[union-attr]
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(url.removesuffix("/metrics") + "/other", timeout=10)
    assert raised.value.code == 404


def test_metrics_off_by_default(broker: BrokerProcess) -> None:
    assert METRICS_URL.search(broker.log_text()) is None


MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
METRIC_NAME = re.compile(r"\b(?:kafka|pybroker)_[a-z_]+")


def test_the_dashboard_and_alert_rules_use_only_served_metrics(metered_broker: BrokerProcess) -> None:
    """docs/monitoring's Grafana dashboard and Prometheus rules name metrics the broker serves (once a record was
    produced and fetched: the per-topic and per-request series exist from their first use)."""
    url = METRICS_URL.search(metered_broker.log_text()).group(1)  # type: ignore[union-attr]
    producer = Producer({"bootstrap.servers": metered_broker.bootstrap})
    producer.produce("dashboard", VALUE)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": metered_broker.bootstrap, "group.id": "dashboard",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["dashboard"])
    message = consumer.poll(30)
    consumer.close()
    assert message is not None and message.value() == VALUE
    served = {name for name, _ in scrape(url)}
    used = set(METRIC_NAME.findall((MONITORING / "grafana-dashboard.json").read_text()))
    used |= set(METRIC_NAME.findall((MONITORING / "alerts.yml").read_text()))
    assert len(used) >= 10
    assert sorted(used - served) == []
