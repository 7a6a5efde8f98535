"""The client compatibility matrix of docs/compatibility.md, produced by running each client.

One broker with metrics on; each client in turn creates a topic, produces ten records with acks=all and consumes
them in a consumer group that commits. Between clients the broker's /metrics is read: the API versions a client
used are the (request, version) counters that grew while it ran (kafka_network_requestmetrics_requests_total, with
Kafka's version label). The table rendered from that must be the one in the page; `PYBROKER_WRITE_DOCS=1` writes
it instead. Java's kafka-clients runs when ../shared/jvm-clients is there (as in CI); without it the Java column is
left out of the comparison.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import urllib.request
from importlib.metadata import version
from pathlib import Path
from typing import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pybroker.protocol.api_keys import ApiKey
from pybroker.server.metrics import request_name
from tests.integration.broker_process import REPO, BrokerProcess
from tools.gen_docs import block_pattern, replace_block

PAGE = REPO / "docs" / "compatibility.md"
BLOCK = "client-matrix"
RECORDS = 10
JAVA = "Java kafka-clients"
#: sent on a timer, so whether the scenario's few seconds see one depends on timing: left out of the table
TIMED = {"Heartbeat", "PushTelemetry", "ConsumerGroupHeartbeat"}
Usage = dict[str, set[int]]  # API name -> versions used


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    process = BrokerProcess(tmp_path_factory.mktemp("compatibility"),
                            {"metrics.port": "0", "offsets.topic.num.partitions": "1"}).start()
    url = re.search(r"(http://\S+/metrics)", process.log_text())
    assert url, process.log_text()
    yield process, url.group(1)
    process.kill()


def counts(url: str) -> dict[tuple[str, int], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.labels["request"], int(sample.labels["version"])): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == "kafka_network_requestmetrics_requests_total"}


def usage(url: str, run: Callable[[], None]) -> Usage:
    before = counts(url)
    run()
    used: Usage = {}
    for (request, api_version), count in counts(url).items():
        if count > before.get((request, api_version), 0) and request not in TIMED:
            used.setdefault(request, set()).add(api_version)
    return used


def cli(*args: str, stdin: str | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pybroker", *args], input=stdin, cwd=REPO, check=True, capture_output=True,
                   text=True, timeout=60)


def pybroker_tools(bootstrap: str, topic: str) -> None:
    cli("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", "1",
        "--replication-factor", "1")
    cli("console-producer", "--bootstrap-server", bootstrap, "--topic", topic, "--request-required-acks", "-1",
        stdin="".join(f"m{i}\n" for i in range(RECORDS)))
    cli("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--group", f"{topic}-group",
        "--from-beginning", "--max-messages", str(RECORDS))


def confluent(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, b"m%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    received = 0
    while received < RECORDS:
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        received += 1
    consumer.commit(asynchronous=False)
    consumer.close()


def kafka_python(bootstrap: str, topic: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(RECORDS):
        producer.send(topic, b"m%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-group",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=30000)
    # The topic's metadata before the first join (test_groups_kafka_python.Member: a kafka-python 3.0.12 bug).
    assert topic in consumer.topics()
    assert len([record for _, record in zip(range(RECORDS), consumer)]) == RECORDS
    consumer.commit()
    consumer.close()


def aiokafka(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await admin.close()
        async with AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all") as producer:
            for i in range(RECORDS):
                await producer.send_and_wait(topic, b"m%d" % i)
        async with AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-group",
                                    auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
            for _ in range(RECORDS):
                await asyncio.wait_for(consumer.getone(), 30)
            await consumer.commit()
    asyncio.run(scenario())


def kcat(bootstrap: str, topic: str) -> None:
    """kcat creates no topics itself: the broker creates it on the producer's metadata request
    (auto.create.topics.enable), as Kafka does."""
    subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "acks=all"], check=True, timeout=60,
                   input="".join(f"m{i}\n" for i in range(RECORDS)), text=True, capture_output=True)
    consumed = subprocess.run(["kcat", "-b", bootstrap, "-G", f"{topic}-group", "-o", "beginning", "-c",
                               str(RECORDS), "-q", topic], check=True, timeout=60, text=True, capture_output=True)
    assert len(consumed.stdout.splitlines()) == RECORDS


def kcat_version() -> str:
    banner = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=30).stdout
    match = re.search(r"Version (\S+) .*librdkafka (\S+)", banner)
    assert match, banner
    return f"kcat {match.group(1)} (librdkafka {match.group(2)})"


def java(bootstrap: str, _topic: str) -> None:
    from tests.integration.java_scenarios import JAVA_SOURCES, _parse

    run = subprocess.run(["java", f"-Dlog4j2.configurationFile={JAVA_SOURCES / 'log4j2.properties'}", "-cp",
                          java_classpath(), "Scenarios", bootstrap, "admin_topics", "produce_none",
                          "consumer_group_rebalance"], capture_output=True, text=True, timeout=300)
    outcomes = _parse(run.stdout)
    assert outcomes and all(o.passed for o in outcomes.values()), run.stdout[-3000:] + run.stderr[-3000:]


_JAVA_CLASSPATH: list[str] = []


def java_classpath() -> str:
    from tests.integration.java_scenarios import compile_scenarios
    from tests.integration.test_java_client import CLIENT_JAR

    if not _JAVA_CLASSPATH:
        classes = Path(os.environ.get("TMPDIR", "/tmp")) / f"pybroker-compat-java-{os.getpid()}"
        _JAVA_CLASSPATH.append(compile_scenarios(classes, [CLIENT_JAR], "v39", "-Xlint:all"))
    return _JAVA_CLASSPATH[0]


def java_available() -> bool:
    from tests.integration.test_java_client import CLIENT_JAR

    return CLIENT_JAR.exists()


def clients() -> list[tuple[str, Callable[[str, str], None]]]:
    import confluent_kafka

    found = [
        (f"pybroker tools {version('pybroker')}", pybroker_tools),
        (f"confluent-kafka {version('confluent-kafka')} (librdkafka {confluent_kafka.libversion()[0]})", confluent),
        (f"kafka-python {version('kafka-python')}", kafka_python),
        (f"aiokafka {version('aiokafka')}", aiokafka),
        (kcat_version(), kcat),
    ]
    if java_available():
        from tests.integration.test_java_client import CLIENT_JAR

        found.append((f"{JAVA} {CLIENT_JAR.stem.removeprefix('kafka-clients-')}", java))
    return found


def render(columns: dict[str, Usage]) -> str:
    apis = sorted({api for used in columns.values() for api in used}, key=lambda name: _key(name))
    lines = ["| API | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for api in apis:
        cells = [", ".join(f"v{v}" for v in sorted(used[api])) if api in used else "" for used in columns.values()]
        lines.append(f"| {api} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _key(name: str) -> int:
    return next(key for key in ApiKey if request_name(key) == name)


def without_java(table: str) -> str:
    """The table with the Java column (the last) dropped, for a checkout without ../shared."""
    if JAVA not in table.splitlines()[0]:
        return table
    rows = []
    for line in table.splitlines():
        cells = line.strip().strip("|").split("|")[:-1]
        if len(rows) < 2 or any(cell.strip() for cell in cells[1:]):  # rows of Java's APIs alone go too
            rows.append("|" + "|".join(cells) + "|")
    return "\n".join(rows) + "\n"


def test_the_matrix_in_the_docs_is_what_the_clients_use(metered: tuple[BrokerProcess, str]) -> None:
    broker, url = metered
    columns = {}
    for index, (name, run) in enumerate(clients()):
        columns[name] = usage(url, lambda: run(broker.bootstrap, f"compat-{index}"))
        assert "Produce" in columns[name] and "Fetch" in columns[name], (name, columns[name])
    table = render(columns)
    text = PAGE.read_text(encoding="utf-8")
    if os.environ.get("PYBROKER_WRITE_DOCS"):
        PAGE.write_text(replace_block(text, BLOCK, table), encoding="utf-8")
        return
    match = block_pattern(BLOCK).search(text)
    assert match, f"docs/compatibility.md has no {BLOCK} block"
    documented = match.group(2)
    if not java_available():
        documented = without_java(documented)
    assert table == documented, ("the clients use other API versions than docs/compatibility.md says; run this "
                                 "test with PYBROKER_WRITE_DOCS=1 to rewrite the table:\n" + table)
