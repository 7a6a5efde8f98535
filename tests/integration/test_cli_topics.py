"""The admin subcommands as a user runs them: `python -m pybroker <tool> ...` against a real broker.

Output lines and exit codes are checked exactly (they are kafka-topics.sh's), and `topics --describe`
is cross-checked with what kcat and confluent-kafka's AdminClient read from the same broker.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.integration.broker_process import REPO, BrokerProcess

ERROR = "Error while executing topic command : "
TOPIC_LINE = re.compile(r"Topic: (\S+)\tTopicId: ([A-Za-z0-9_-]{22})\tPartitionCount: (\d+)\t"
                        r"ReplicationFactor: (\d+)\tConfigs: (.*)")
PARTITION_LINE = re.compile(r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+|none)\tReplicas: ([\d,]*)\tIsr: ([\d,]*)")


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def topics(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run("topics", "--bootstrap-server", broker.bootstrap, *args)


def ok(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert (result.returncode, result.stderr) == (0, ""), result
    return result.stdout.splitlines()


def failed(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (exit code 1, nothing on stdout)."""
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def describe(broker: BrokerProcess, topic: str) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(topic line fields, partition line fields) of `topics --describe --topic`."""
    head, *partitions = ok(topics(broker, "--describe", "--topic", topic))
    topic_match = TOPIC_LINE.fullmatch(head)
    assert topic_match, head
    partition_matches = [PARTITION_LINE.fullmatch(line) for line in partitions]
    assert all(partition_matches), partitions
    return topic_match.groups(), [m.groups() for m in partition_matches if m]


def test_create_list_describe_delete(shared_broker: BrokerProcess) -> None:
    assert ok(topics(shared_broker, "--create", "--topic", "cli-orders", "--partitions", "3",
                     "--replication-factor", "1", "--config", "retention.ms=600000",
                     "--config", "cleanup.policy=compact")) == ["Created topic cli-orders."]
    assert "cli-orders" in ok(topics(shared_broker, "--list", "--exclude-internal"))
    listed = ok(topics(shared_broker, "--list"))
    assert listed == sorted(listed)
    (name, _topic_id, count, factor, configs), partitions = describe(shared_broker, "cli-orders")
    assert (name, count, factor, configs) == ("cli-orders", "3", "1", "cleanup.policy=compact,retention.ms=600000")
    assert partitions == [("cli-orders", str(p), "0", "0", "0") for p in range(3)]
    assert ok(topics(shared_broker, "--delete", "--topic", "cli-orders")) == []
    assert "cli-orders" not in ok(topics(shared_broker, "--list"))


def test_create_existing_topic_fails_unless_if_not_exists(shared_broker: BrokerProcess) -> None:
    ok(topics(shared_broker, "--create", "--topic", "cli-twice", "--partitions", "1", "--replication-factor", "1"))
    assert failed(topics(shared_broker, "--create", "--topic", "cli-twice", "--partitions", "1")) == \
        ERROR + "Topic 'cli-twice' already exists."
    assert ok(topics(shared_broker, "--create", "--topic", "cli-twice", "--if-not-exists")) == []


def test_unknown_topic_fails_unless_if_exists(shared_broker: BrokerProcess) -> None:
    expected = ERROR + "Topic 'cli-missing' does not exist as expected"
    assert failed(topics(shared_broker, "--describe", "--topic", "cli-missing")) == expected
    assert failed(topics(shared_broker, "--alter", "--topic", "cli-missing", "--partitions", "2")) == expected
    assert failed(topics(shared_broker, "--delete", "--topic", "cli-missing")) == expected
    assert ok(topics(shared_broker, "--delete", "--topic", "cli-missing", "--if-exists")) == []


def test_alter_adds_partitions_and_refuses_to_remove_them(shared_broker: BrokerProcess) -> None:
    ok(topics(shared_broker, "--create", "--topic", "cli-grow", "--replica-assignment", "0,0"))
    assert ok(topics(shared_broker, "--alter", "--topic", "cli-grow", "--partitions", "5")) == []
    (_, _, count, factor, _), partitions = describe(shared_broker, "cli-grow")
    assert (count, factor, len(partitions)) == ("5", "1", 5)
    assert failed(topics(shared_broker, "--alter", "--topic", "cli-grow", "--partitions", "2")).startswith(ERROR)


def test_invalid_arguments_exit_1_with_one_line(shared_broker: BrokerProcess) -> None:
    assert failed(topics(shared_broker, "--create", "--topic", "cli-bad", "--partitions", "0")) == \
        ERROR + "The partitions must be greater than 0"
    assert failed(topics(shared_broker, "--create", "--topic", "cli-bad", "--partitions", "1",
                         "--config", "no.such.config=1")).startswith(ERROR)
    assert "exactly one action" in failed(topics(shared_broker, "--list", "--delete"))
    assert "Timed out waiting for connection to ZooKeeper" in failed(
        run("topics", "--zookeeper", "127.0.0.1:1", "--list", "--command-timeout", "1000"))
    assert "--bootstrap-server must be specified" in failed(run("topics", "--list"))


def test_describe_report_options(shared_broker: BrokerProcess) -> None:
    ok(topics(shared_broker, "--create", "--topic", "cli-plain", "--partitions", "2"))
    ok(topics(shared_broker, "--create", "--topic", "cli-override", "--partitions", "1",
              "--config", "max.message.bytes=2000"))
    scope = ("--describe", "--topic", "cli-plain,cli-override")
    assert ok(topics(shared_broker, *scope, "--under-replicated-partitions")) == []
    assert ok(topics(shared_broker, *scope, "--unavailable-partitions")) == []
    assert ok(topics(shared_broker, *scope, "--under-min-isr-partitions")) == []
    at_min = ok(topics(shared_broker, *scope, "--at-min-isr-partitions"))  # min.insync.replicas=1 = ISR size
    assert [PARTITION_LINE.fullmatch(line).group(1, 2) for line in at_min] == \
        [("cli-override", "0"), ("cli-plain", "0"), ("cli-plain", "1")]
    [overridden] = ok(topics(shared_broker, *scope, "--topics-with-overrides"))
    assert TOPIC_LINE.fullmatch(overridden).group(1, 5) == ("cli-override", "max.message.bytes=2000")


def test_unreachable_broker_fails_within_the_timeout() -> None:
    started = time.monotonic()
    line = failed(run("topics", "--bootstrap-server", "127.0.0.1:1", "--list", "--command-timeout", "1000"))
    assert time.monotonic() - started < 10
    assert line.startswith(ERROR + "Timed out after 1000 ms waiting for a connection")
    assert "Connection refused" in line


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_describe_matches_kcat(shared_broker: BrokerProcess) -> None:
    ok(topics(shared_broker, "--create", "--topic", "cli-kcat", "--partitions", "4"))
    (_, _, count, _, _), partitions = describe(shared_broker, "cli-kcat")
    listing = subprocess.run(["kcat", "-L", "-J", "-b", shared_broker.bootstrap, "-t", "cli-kcat"],
                             capture_output=True, text=True, timeout=30, check=True)
    [kcat_topic] = json.loads(listing.stdout)["topics"]
    assert len(kcat_topic["partitions"]) == int(count)
    assert partitions == [("cli-kcat", str(p["partition"]), str(p["leader"]),
                           ",".join(str(r["id"]) for r in p["replicas"]), ",".join(str(r["id"]) for r in p["isrs"]))
                          for p in sorted(kcat_topic["partitions"], key=lambda p: p["partition"])]


def test_describe_matches_confluent_admin_client(shared_broker: BrokerProcess) -> None:
    ok(topics(shared_broker, "--create", "--topic", "cli-confluent", "--partitions", "3",
              "--config", "segment.ms=100000"))
    (_, topic_id, count, factor, configs), partitions = describe(shared_broker, "cli-confluent")
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    described = admin.describe_topics(TopicCollection(["cli-confluent"]))["cli-confluent"].result(timeout=30)
    # librdkafka prints ids in standard base64; Kafka's Uuid.toString (and we) use the URL-safe alphabet.
    librdkafka_id = str(described.topic_id).translate(str.maketrans("+/", "-_"))
    assert (librdkafka_id, len(described.partitions)) == (topic_id, int(count))
    assert int(factor) == len(described.partitions[0].replicas)
    assert partitions == [("cli-confluent", str(p.id), str(p.leader.id), ",".join(str(n.id) for n in p.replicas),
                           ",".join(str(n.id) for n in p.isr)) for p in described.partitions]
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cli-confluent")
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs == ",".join(f"{e.name}={e.value}" for e in sorted(entries.values(), key=lambda e: e.name)
                               if not e.is_default)


def test_broker_api_versions(shared_broker: BrokerProcess) -> None:
    lines = ok(run("broker-api-versions", "--bootstrap-server", shared_broker.bootstrap))
    assert lines[0] == f"{shared_broker.bootstrap} (id: 0 rack: null) -> ("
    assert lines[-1] == ")"
    assert "\tApiVersions(18): 0 to 4 [usable: 4]," in lines
    assert "\tProduce(0): 3 to 13 [usable: 13]," in lines
    body = lines[1:-1]
    assert all(re.fullmatch(r"\t\w+\(\d+\): \d+( to \d+)? \[usable: \d+\],", line) for line in body[:-1]), body
    assert not body[-1].endswith(",")


def test_get_offsets(shared_broker: BrokerProcess) -> None:
    ok(topics(shared_broker, "--create", "--topic", "cli-offsets", "--partitions", "2"))
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(5):
        producer.produce("cli-offsets", value=b"v", partition=0 if i < 3 else 1)
    assert producer.flush(30) == 0
    get = ("get-offsets", "--bootstrap-server", shared_broker.bootstrap, "--topic", "cli-offsets")
    assert ok(run(*get)) == ["cli-offsets:0:3", "cli-offsets:1:2"]
    assert ok(run(*get, "--time", "-2")) == ["cli-offsets:0:0", "cli-offsets:1:0"]
    assert ok(run(*get, "--partitions", "1", "--time", "earliest")) == ["cli-offsets:1:0"]
    assert ok(run(*get, "--time", str(int(time.time() * 1000) + 3_600_000))) == ["cli-offsets:0:", "cli-offsets:1:"]
    assert failed(run("get-offsets", "--bootstrap-server", shared_broker.bootstrap, "--topic", "cli-none")) == \
        "Error occurred: Could not match any topic-partitions with the specified filters"


@pytest.mark.parametrize("tool", ["topics", "broker-api-versions", "get-offsets"])
def test_every_tool_has_help(tool: str) -> None:
    result = run(tool, "--help")
    assert result.returncode == 0 and f"usage: pybroker {tool}" in result.stdout


def test_serve_on_a_taken_port_logs_one_error_line_in_kafkas_layout(shared_broker: BrokerProcess,
                                                                    tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"broker.id=0\nlisteners=PLAINTEXT://{shared_broker.bootstrap}\nlog.dirs={tmp_path / 'logs'}\n"
                      "no.such.key=1\n")
    result = run("serve", str(config))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert re.fullmatch(r"\[[-\d :,]+\] WARN The configuration 'no.such.key' was supplied but isn't a known config\. "
                        r"\(pybroker\.config\)", lines[0])
    assert re.fullmatch(r"\[[-\d :,]+\] ERROR \[KafkaServer id=0\] Fatal error during startup, exiting: .*Socket "
                        r"server failed to bind to [\d.]+:\d+: Address already in use\. \(pybroker\.server\)", lines[-1])
