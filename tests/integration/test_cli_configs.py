"""`pybroker configs` against a real broker, cross-checked with confluent-kafka's AdminClient."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.integration.broker_process import BrokerProcess
from tests.integration.test_cli_topics import failed, ok, run

ERROR = "Error while executing config command : "


def configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run("configs", "--bootstrap-server", broker.bootstrap, *args)


def test_alter_and_describe_round_trip(shared_broker: BrokerProcess) -> None:
    ok(run("topics", "--bootstrap-server", shared_broker.bootstrap, "--create", "--topic", "cfg-topic"))
    entity = ("--entity-type", "topics", "--entity-name", "cfg-topic")
    assert ok(configs(shared_broker, "--describe", *entity)) == ["Dynamic configs for topic cfg-topic are:"]
    assert ok(configs(shared_broker, "--alter", *entity, "--add-config",
                      "retention.ms=60000,cleanup.policy=[compact,delete]")) == \
        ["Completed updating config for topic cfg-topic."]
    assert ok(configs(shared_broker, "--describe", "--topic", "cfg-topic")) == [
        "Dynamic configs for topic cfg-topic are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}",
    ]
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cfg-topic")
    seen = admin.describe_configs([resource])[resource].result(timeout=30)
    assert (seen["retention.ms"].value, seen["cleanup.policy"].value) == ("60000", "compact,delete")
    assert ok(configs(shared_broker, "--alter", *entity, "--delete-config", "cleanup.policy")) == \
        ["Completed updating config for topic cfg-topic."]
    described = ok(configs(shared_broker, "--describe", *entity, "--all"))
    assert described[0] == "All configs for topic cfg-topic are:"
    assert "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}" in described
    assert "  cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}" in described


def test_broker_configs_and_bad_input(shared_broker: BrokerProcess) -> None:
    described = ok(configs(shared_broker, "--describe", "--entity-type", "brokers", "--entity-name", "0", "--all"))
    assert described[0] == "All configs for broker 0 are:"
    assert "  num.partitions=1 sensitive=false synonyms={DEFAULT_CONFIG:num.partitions=1}" in described
    assert ok(configs(shared_broker, "--describe", "--broker", "0")) == ["Dynamic configs for broker 0 are:"]
    assert failed(configs(shared_broker, "--alter", "--broker", "0", "--add-config", "num.partitions=3")) \
        .startswith(ERROR)
    ok(run("topics", "--bootstrap-server", shared_broker.bootstrap, "--create", "--topic", "cfg-bad"))
    assert failed(configs(shared_broker, "--alter", "--topic", "cfg-bad", "--delete-config", "no.such.config")) == \
        ERROR + "Invalid config(s): no.such.config"
    assert failed(configs(shared_broker, "--alter", "--topic", "cfg-bad", "--add-config", "retention.ms=soon")) \
        .startswith(ERROR)
    assert failed(configs(shared_broker, "--describe", "--topic", "cfg-missing")).startswith(ERROR)
    assert "--entity-type must be specified" in failed(configs(shared_broker, "--describe"))


@pytest.mark.parametrize("tool, args, prefix", [
    ("configs", ("--describe", "--topic", "t"), ERROR),
    ("consumer-groups", ("--list",), "Error: Executing consumer group command failed due to "),
])
def test_unreachable_broker_fails_within_the_timeout(tool: str, args: tuple[str, ...], prefix: str) -> None:
    line = failed(run(tool, "--bootstrap-server", "127.0.0.1:1", "--command-timeout", "500", *args))
    assert line.startswith(prefix + "Timed out after 500 ms waiting for a connection")


def test_client_metrics_subscriptions(shared_broker: BrokerProcess) -> None:
    """kafka-configs.sh --entity-type client-metrics (KIP-714): a subscription is created by its first
    --alter, listed by ListClientMetricsResources, and refused with the broker's text when invalid."""
    entity = ("--entity-type", "client-metrics", "--entity-name", "cli-sub")
    assert ok(configs(shared_broker, "--describe", *entity)) == [
        "The client-metric 'cli-sub' doesn't exist and doesn't have dynamic config."]
    assert ok(configs(shared_broker, "--alter", *entity, "--add-config",
                      "metrics=[org.apache.kafka.producer.],interval.ms=5000")) == \
        ["Completed updating config for client-metric cli-sub."]
    expected = ["Dynamic configs for client-metric cli-sub are:",
                "  interval.ms=5000 sensitive=false synonyms={}",
                "  metrics=org.apache.kafka.producer. sensitive=false synonyms={}"]
    assert ok(configs(shared_broker, "--describe", *entity)) == expected
    listed = ok(configs(shared_broker, "--describe", "--entity-type", "client-metrics"))
    assert listed[listed.index(expected[0]):listed.index(expected[0]) + 3] == expected
    refused = failed(configs(shared_broker, "--alter", *entity, "--add-config", "interval.ms=1"))
    assert refused.startswith(ERROR + "Invalid value 1 for interval.ms")
