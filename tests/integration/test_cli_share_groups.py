"""`pybroker share-groups` against a broker with a live share group (confluent-kafka's ShareConsumer)."""

from __future__ import annotations

import subprocess
import sys
from typing import Iterator

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.eventually import eventually
from tests.integration.broker_process import REPO, BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("share-cli")).start()
    yield process
    process.kill()


def share_groups(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", "share-groups", "--bootstrap-server", broker.bootstrap,
                           *args], capture_output=True, text=True, cwd=REPO, timeout=60)


def test_list_describe_and_delete(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("cli-share", 2, 1)])["cli-share"].result(timeout=20)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-share-group",
                              "client.id": "cli-share-client"})
    consumer.subscribe(["cli-share"])

    def described() -> str | None:
        consumer.poll(0.2)
        result = share_groups(broker, "--describe", "--members", "--group", "cli-share-group")
        return result.stdout if result.returncode == 0 and "cli-share(0,1)" in result.stdout else None

    members = eventually(described, "the member to be assigned both partitions")
    assert "cli-share-client" in members and "#PARTITIONS" in members
    listed = share_groups(broker, "--list")
    assert listed.returncode == 0 and listed.stdout.split() == ["cli-share-group"]
    consumer_groups = subprocess.run([sys.executable, "-m", "pybroker", "consumer-groups", "--bootstrap-server",
                                      broker.bootstrap, "--list"], capture_output=True, text=True, cwd=REPO,
                                     timeout=60)
    assert "cli-share-group" not in consumer_groups.stdout
    state = share_groups(broker, "--describe", "--state", "--group", "cli-share-group")
    assert state.returncode == 0 and "Stable" in state.stdout
    busy = share_groups(broker, "--delete", "--group", "cli-share-group")
    assert busy.returncode == 1 and "not empty" in busy.stdout + busy.stderr
    consumer.close()
    deleted = share_groups(broker, "--delete", "--group", "cli-share-group")
    assert deleted.returncode == 0, deleted.stderr
    missing = share_groups(broker, "--describe", "--state", "--group", "cli-share-group")
    assert missing.returncode == 1 and "does not exist" in missing.stdout + missing.stderr


def test_offsets_describe_reset_and_delete(broker: BrokerProcess) -> None:
    """--describe --offsets, --reset-offsets (a dry run, then --execute) and --delete-offsets through
    DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets; a share consumer then reads from
    the start offset set (the group's default, latest, would give it nothing)."""
    from confluent_kafka import AcknowledgeType, Producer

    from tests.integration.test_share_groups_confluent import _consumer

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("cli-offsets", 1, 1)])["cli-offsets"].result(timeout=20)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce("cli-offsets", value=b"r%d" % i)
    assert producer.flush(20) == 0
    group = "cli-offsets-group"
    reset = ["--reset-offsets", "--group", group, "--topic", "cli-offsets"]

    dry = share_groups(broker, *reset, "--to-earliest", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.split("\n")[2].split() == [group, "cli-offsets", "0", "0"]
    missing = share_groups(broker, "--describe", "--group", group)
    assert missing.returncode == 1 and "does not exist" in missing.stderr  # a dry run changes nothing

    done = share_groups(broker, *reset, "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    described = share_groups(broker, "--describe", "--offsets", "--group", group)
    assert described.returncode == 0, described.stderr
    assert described.stdout.split("\n")[1].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert described.stdout.split("\n")[2].split() == [group, "cli-offsets", "0", "0", "5"]

    consumer = _consumer(broker.bootstrap, group, explicit=True)
    consumer.subscribe(["cli-offsets"])
    got: list[bytes] = []

    def all_read() -> bool:
        for message in consumer.poll(0.5):
            if message.error() is None:
                got.append(message.value())
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
        return len(got) == 5

    eventually(all_read, "the five records from the start offset set")
    busy = share_groups(broker, *reset, "--to-offset", "2", "--execute")
    assert busy.returncode == 1 and f"Share group '{group}' is not empty." in busy.stderr
    consumer.close()
    assert share_groups(broker, "--describe", "--group", group).stdout.split("\n")[2].split() == \
        [group, "cli-offsets", "0", "5", "0"]

    assert share_groups(broker, *reset, "--to-offset", "2", "--execute").returncode == 0
    verbose = share_groups(broker, "--describe", "--offsets", "--verbose", "--group", group).stdout.split("\n")
    assert verbose[1].split() == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
    assert verbose[2].split()[4:] == ["2", "3"]

    deleted = share_groups(broker, "--delete-offsets", "--group", group, "--topic", "cli-offsets")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.split("\n")[2].split() == ["cli-offsets", "Successful"]
    after = share_groups(broker, "--describe", "--group", group)
    assert after.returncode == 0 and "cli-offsets" not in after.stdout


def test_bad_offsets_options_are_refused(broker: BrokerProcess) -> None:
    for args, message in ((["--reset-offsets", "--group", "g", "--topic", "t"], "takes exactly one of these options"),
                          (["--reset-offsets", "--group", "g", "--to-latest"], "[--all-topics], [--topic]"),
                          (["--delete-offsets", "--group", "g"], "takes the option [--topic]"),
                          (["--describe", "--group", "g", "--to-latest"], "can only be used with --reset-offsets")):
        result = share_groups(broker, *args)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
