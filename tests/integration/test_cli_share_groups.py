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


def test_what_is_not_served_says_so(broker: BrokerProcess) -> None:
    for args in (["--describe", "--group", "g"], ["--reset-offsets", "--group", "g"]):
        result = share_groups(broker, *args)
        assert result.returncode == 1 and "not serve yet" in result.stderr
