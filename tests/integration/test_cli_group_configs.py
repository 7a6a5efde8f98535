"""`pybroker configs --entity-type groups` (kafka-configs.sh's GROUP config resources, KIP-848/KIP-932) against a
real broker: a share group config set by the CLI changes where confluent-kafka's ShareConsumer starts reading."""

from __future__ import annotations

import subprocess

from confluent_kafka import Producer, ShareConsumer

from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_cli_configs import ERROR, configs
from tests.integration.test_cli_topics import failed, ok, run

RESET = "share.auto.offset.reset"


def test_earliest_set_by_the_cli_makes_a_share_consumer_read_from_the_start(shared_broker: BrokerProcess) -> None:
    ok(run("topics", "--bootstrap-server", shared_broker.bootstrap, "--create", "--topic", "gcfg-jobs"))
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(5):
        producer.produce("gcfg-jobs", f"job-{i}".encode())
    assert producer.flush(10) == 0
    # a group with a config and no member yet: not listed by this broker, so not "existing" to describe
    assert ok(configs(shared_broker, "--alter", "--entity-type", "groups", "--entity-name", "gcfg-workers",
                      "--add-config", f"{RESET}=earliest,share.record.lock.duration.ms=15000")) == \
        ["Completed updating config for group gcfg-workers."]
    consumer = ShareConsumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "gcfg-workers"})
    consumer.subscribe(["gcfg-jobs"])
    seen: list[bytes] = []

    def all_read() -> bool:
        seen.extend(m.value() for m in consumer.poll(0.5) if m.error() is None)
        return len(seen) >= 5

    try:
        eventually(all_read, lambda: f"the records produced before the group existed, read so far: {seen}")
        assert sorted(seen) == [f"job-{i}".encode() for i in range(5)]
        assert ok(configs(shared_broker, "--describe", "--group", "gcfg-workers")) == [
            "Dynamic configs for group gcfg-workers are:",
            f"  {RESET}=earliest sensitive=false synonyms={{}}",
            "  share.record.lock.duration.ms=15000 sensitive=false synonyms={}",
        ]
        assert "Dynamic configs for group gcfg-workers are:" in ok(configs(shared_broker, "--describe",
                                                                           "--entity-type", "groups"))
        assert ok(configs(shared_broker, "--alter", "--group", "gcfg-workers", "--delete-config",
                          "share.record.lock.duration.ms")) == ["Completed updating config for group gcfg-workers."]
        described = ok(configs(shared_broker, "--describe", "--group", "gcfg-workers", "--all"))
    finally:
        consumer.close()
    assert described[0] == "All configs for group gcfg-workers are:"
    assert f"  {RESET}=earliest sensitive=false synonyms={{}}" in described
    assert any(line.startswith("  share.record.lock.duration.ms=30000 ") for line in described), described


def group_alter(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return configs(broker, "--alter", "--group", "gcfg-bad", *args)


def test_bad_group_configs_are_refused_in_one_line(shared_broker: BrokerProcess) -> None:
    assert failed(group_alter(shared_broker, "--add-config", "no.such.config=1")) == \
        ERROR + "Unknown group config name: no.such.config"
    assert "share.record.lock.duration.ms" in failed(group_alter(
        shared_broker, "--add-config", "share.record.lock.duration.ms=1"))
    assert RESET in failed(group_alter(shared_broker, "--add-config", f"{RESET}=sometimes"))
    assert failed(group_alter(shared_broker, "--delete-config", "no.such.config")) == \
        ERROR + "Invalid config(s): no.such.config"
    assert ok(configs(shared_broker, "--describe", "--group", "gcfg-missing")) == [
        "The group 'gcfg-missing' doesn't exist and doesn't have dynamic config."]
    assert "An entity name must be specified with --alter of groups" in failed(configs(
        shared_broker, "--alter", "--entity-type", "groups", "--add-config", f"{RESET}=earliest"))
    assert "--entity-default is not supported with groups" in failed(configs(
        shared_broker, "--describe", "--entity-type", "groups", "--entity-default"))
    assert "should not be used in conjunction" in failed(configs(
        shared_broker, "--describe", "--entity-type", "groups", "--group", "g"))
