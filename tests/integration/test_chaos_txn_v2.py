"""The fault harness's transactional workloads with transactions V2 producers (`python -m chaos --txn --txn-version 2`,
chaos/txn_v2.py), without faults on one broker: the Java 4.2 client's loops run V2 (EndTxn v5, Produce v12+ adding
the partitions, TxnOffsetCommit v5 adding the group's offsets, never AddPartitionsToTxn nor AddOffsetsToTxn, counted
by the broker's request metrics), their events are the ones the checker reads, and it finds the round clean."""

from __future__ import annotations

import re
import time
import urllib.request
from collections import Counter
from typing import Iterator

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from chaos.checker import check
from chaos.drain import drain
from chaos.history import History
from chaos.txn_v2 import JavaTxnWorkload
from chaos.workload import CTP_TOPIC, QUEUE_TOPIC, TXN_TOPIC
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic

PARTITIONS = 2
QUEUED = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("chaos-txn-v2"), {
        "metrics.port": "0", "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1"}).start()
    for topic in (TXN_TOPIC, QUEUE_TOPIC, CTP_TOPIC):
        create_topic(process.bootstrap, topic, partitions=PARTITIONS)
    yield process
    process.kill()


def requests_by_version(broker: BrokerProcess) -> dict[tuple[str, int], float]:
    url = re.findall(r"Prometheus metrics on (http://\S+/metrics)", broker.log_text())[-1]
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.labels["request"], int(sample.labels["version"])): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == "kafka_network_requestmetrics_requests_total"}


def test_the_java_workload_runs_transactions_v2_and_its_history_checks_clean(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for n in range(QUEUED):  # the consume-transform-produce loop's input
        producer.produce(QUEUE_TOPIC, f"q-{n}".encode(), partition=n % PARTITIONS)
    assert producer.flush(30) == 0
    history = History()
    workload = JavaTxnWorkload(history, broker.bootstrap, PARTITIONS, seed=5)
    workload.start(time.monotonic() + 120)
    try:
        def progressed() -> bool:
            done = Counter((e["process"], e["outcome"]) for e in history.snapshot() if e["type"] == "txn")
            transformed = sum(len(e["values"]) for e in history.snapshot()
                              if e["type"] == "txn" and e["process"] == "x0" and e["outcome"] == "commit")
            return done["t0", "commit"] >= 3 and done["t0", "abort"] >= 1 and transformed >= QUEUED

        eventually(progressed, "committed and aborted transactions, and every queued value transformed", 90)
    finally:
        workload.stop()
    drain(history, broker.bootstrap, [QUEUE_TOPIC, TXN_TOPIC, CTP_TOPIC], PARTITIONS, 30.0)
    drain(history, broker.bootstrap, [TXN_TOPIC, CTP_TOPIC], PARTITIONS, 30.0, event="read-uncommitted")
    report = check(history.snapshot())
    assert report.clean, report.summary()
    assert report.stats["txns"] > 0
    used = requests_by_version(broker)
    assert used.get(("EndTxn", 5), 0) > 0 and used.get(("TxnOffsetCommit", 5), 0) > 0, used
    assert used.get(("Produce", 13), 0) > 0, used  # the Java client's; the queue's librdkafka producer sends v10
    assert not [key for key in used if key[0] in ("AddPartitionsToTxn", "AddOffsetsToTxn")], used
