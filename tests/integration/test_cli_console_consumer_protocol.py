"""`pybroker console-consumer --group G --consumer-property group.protocol=consumer`: our own client as a
KIP-848 member. A second process joining takes half the partitions from the first, which commits them at
revocation; the survivor takes over what the other one committed when it exits, and the group's offsets
and member epochs are visible afterwards."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer

from pybroker.client import GroupAdmin, GroupDescription, KafkaClient
from tests.eventually import eventually
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.groups_common import create_topic
from tests.integration.test_cli_topics import run

PARTITIONS = 4
PER_PARTITION = 10
OVERRIDES = {
    "offsets.topic.num.partitions": "4",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "6000",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("console848"), overrides=OVERRIDES).start()
    yield process
    process.kill()


class ConsoleMember:
    """A console-consumer process in the group; the (partition, value) of every line it printed."""

    def __init__(self, broker: BrokerProcess, topic: str, group: str, *extra: str) -> None:
        args = [sys.executable, "-m", "pybroker", "console-consumer", "--bootstrap-server", broker.bootstrap,
                "--topic", topic, "--group", group, "--from-beginning", "--property", "print.partition=true",
                *extra]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.records: list[tuple[int, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            partition, _, value = line.rstrip("\n").partition("\t")
            self.records.append((int(partition.removeprefix("Partition:")), value))

    def partitions(self) -> set[int]:
        return {p for p, _ in self.records}

    def stop(self) -> str:
        """SIGTERM (commit and leave), the exit code checked; its stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        _, stderr = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, stderr
        return stderr

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def describe(broker: BrokerProcess, group: str) -> GroupDescription:
    """The group as ConsumerGroupDescribe reports it (our client asks for it when DescribeGroups says Dead)."""
    async def go() -> GroupDescription:
        async with KafkaClient(broker.bootstrap, timeout=10) as client:
            return await GroupAdmin(client).describe_group(group)
    return asyncio.run(go())


def stable_split(broker: BrokerProcess, group: str, members: int) -> GroupDescription | None:
    """The group once ``members`` members each own their whole (non-empty) target, covering the topic."""
    described = describe(broker, group)
    owned = [{tp.partition for tp in m.assignment} for m in described.members]
    if (described.group_type == "consumer" and len(owned) == members and all(owned)
            and all(set(m.assignment) == set(m.target) and m.member_epoch == described.group_epoch
                    for m in described.members)
            and sum(map(len, owned)) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS))):
        return described
    return None


def produce(broker: BrokerProcess, topic: str, round_: int) -> set[tuple[int, str]]:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    sent = {(p, f"r{round_}-p{p}-{i}") for p in range(PARTITIONS) for i in range(PER_PARTITION)}
    for partition, value in sorted(sent):
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(30) == 0
    return sent


def test_two_console_consumers_split_then_one_takes_over(broker: BrokerProcess) -> None:
    topic, group = "console-848", "console-848-group"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    protocol = ("--consumer-property", "group.protocol=consumer")
    first = ConsoleMember(broker, topic, group, *protocol)
    second: ConsoleMember | None = None
    try:
        eventually(lambda: stable_split(broker, group, 1), "the first member owning every partition")
        sent_alone = produce(broker, topic, 0)
        eventually(lambda: len(first.records) >= len(sent_alone), "the first member printing round 0")
        assert sorted(first.records) == sorted(sent_alone)
        alone = len(first.records)

        second = ConsoleMember(broker, topic, group, *protocol)
        split = eventually(lambda: stable_split(broker, group, 2), "two members owning 2 partitions each")
        epochs_before = {m.member_id: m.member_epoch for m in split.members}

        sent = produce(broker, topic, 1)
        eventually(lambda: len(first.records) - alone + len(second.records) >= len(sent),
                   lambda: f"{len(sent)} records printed, got {len(first.records) - alone} + {len(second.records)}")
        first_split = {p for p, _ in first.records[alone:]}
        assert first_split.isdisjoint(second.partitions())
        assert len(first_split) == len(second.partitions()) == PARTITIONS // 2
        assert set(first.records[alone:]) | set(second.records) == sent, \
            "the partitions moved to the second member were not committed at revocation"
        assert len(first.records) - alone + len(second.records) == len(sent), "a record was printed twice"

        assert first.stop().splitlines()[-1] == f"Processed a total of {len(first.records)} messages"
        taken_over = eventually(lambda: stable_split(broker, group, 1), "the survivor owning every partition")
        [survivor] = taken_over.members
        assert survivor.member_id in epochs_before
        assert survivor.member_epoch > epochs_before[survivor.member_id]
        assert taken_over.group_epoch == survivor.member_epoch

        printed_before = len(second.records)
        sent_again = produce(broker, topic, 2)
        eventually(lambda: len(second.records) - printed_before >= len(sent_again),
                   lambda: f"{len(sent_again)} more records, got {len(second.records) - printed_before}")
        assert sorted(second.records[printed_before:]) == sorted(sent_again), \
            "the survivor did not resume exactly at the committed offsets"
        second.stop()
    finally:
        first.kill()
        if second is not None:
            second.kill()

    described = run("consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group)
    assert described.returncode == 0, described
    assert f"Consumer group '{group}' has no active members." in described.stderr
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith(group)]
    assert sorted((int(r[2]), int(r[3]), int(r[5])) for r in rows) == \
        [(p, 3 * PER_PARTITION, 0) for p in range(PARTITIONS)], described.stdout


@pytest.mark.parametrize("source", ["--consumer-property", "--consumer.config"])
def test_bad_group_protocol_is_a_usage_error(broker: BrokerProcess, source: str, tmp_path: Path) -> None:
    option = ["--consumer-property", "group.protocol=eager"]
    if source == "--consumer.config":
        (tmp_path / "consumer.properties").write_text("group.protocol=eager\n")
        option = ["--consumer.config", str(tmp_path / "consumer.properties")]
    result = subprocess.run([sys.executable, "-m", "pybroker", "console-consumer", "--bootstrap-server",
                             broker.bootstrap, "--topic", "t", "--group", "g", *option],
                            capture_output=True, text=True, cwd=REPO, timeout=30)
    assert result.returncode == 1
    assert "Invalid value eager for configuration group.protocol" in result.stderr
