"""`pybroker configs --entity-type users|clients` against a real broker: quotas as kafka-configs.sh
sets and prints them, SCRAM credentials through the same command, and ConfigCommand's refusals."""

from __future__ import annotations

import asyncio
import subprocess

from pybroker.client import KafkaClient
from pybroker.client.quota_admin import describe_client_quotas
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_cli_topics import failed, ok, run

ERROR = "Error while executing config command : "


def configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run("configs", "--bootstrap-server", broker.bootstrap, *args)


def stored(broker: BrokerProcess) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """Every quota entity the broker holds, read with a raw DescribeClientQuotas (an empty non-strict filter)."""
    async def go() -> list:
        async with KafkaClient(broker.bootstrap) as client:
            return await describe_client_quotas(client, [])
    return {tuple(sorted(entity.items())): values for entity, values in asyncio.run(go())}


def test_user_client_and_default_quotas_round_trip(shared_broker: BrokerProcess) -> None:
    alice = ("--entity-type", "users", "--entity-name", "alice")
    assert ok(configs(shared_broker, "--alter", *alice, "--add-config",
                      "producer_byte_rate=1048576,consumer_byte_rate=2097152")) == \
        ["Completed updating config for user alice."]
    assert ok(configs(shared_broker, "--alter", *alice, "--entity-type", "clients", "--entity-name", "app",
                      "--add-config", "request_percentage=12.5")) == ["Completed updating config for user alice."]
    assert ok(configs(shared_broker, "--alter", "--client-defaults", "--add-config", "producer_byte_rate=10485760")) \
        == ["Completed updating default config for clients in the cluster."]
    assert ok(configs(shared_broker, "--alter", "--entity-type", "users", "--entity-default", "--add-config",
                      "controller_mutation_rate=5")) == ["Completed updating default config for users in the cluster."]
    assert ok(configs(shared_broker, "--alter", "--client", "app", "--add-config", "consumer_byte_rate=4096")) == \
        ["Completed updating config for client app."]
    assert stored(shared_broker) == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        (("client-id", "app"), ("user", "alice")): {"request_percentage": 12.5},
        (("client-id", None),): {"producer_byte_rate": 10485760.0},
        (("user", None),): {"controller_mutation_rate": 5.0},
        (("client-id", "app"),): {"consumer_byte_rate": 4096.0},
    }

    assert ok(configs(shared_broker, "--describe", *alice)) == [
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0",
        "Error retrieving SCRAM credential configs for user-principal 'alice': ResourceNotFoundException: "
        "Attempt to describe a user credential that does not exist: alice",
    ]
    assert ok(configs(shared_broker, "--describe", "--user", "alice", "--client", "app")) == \
        ["Quota configs for user-principal 'alice', client-id 'app' are request_percentage=12.5"]
    assert ok(configs(shared_broker, "--describe", "--entity-type", "clients", "--entity-default")) == \
        ["Quota configs for the default client-id are producer_byte_rate=1.048576E7"]
    assert ok(configs(shared_broker, "--describe", "--user-defaults")) == \
        ["Quota configs for the default user-principal are controller_mutation_rate=5.0"]
    assert sorted(ok(configs(shared_broker, "--describe", "--entity-type", "clients"))) == [
        "Quota configs for client-id 'app' are consumer_byte_rate=4096.0",
        "Quota configs for the default client-id are producer_byte_rate=1.048576E7",
    ]  # a type without a name matches every entity of that type alone, the default too (Kafka's SPECIFIED)

    assert ok(configs(shared_broker, "--alter", "--user", "alice", "--delete-config", "producer_byte_rate")) == \
        ["Completed updating config for user alice."]
    assert stored(shared_broker)[(("user", "alice"),)] == {"consumer_byte_rate": 2097152.0}
    assert failed(configs(shared_broker, "--alter", "--user", "alice", "--delete-config", "producer_byte_rate")) == \
        ERROR + "Invalid config(s): producer_byte_rate"
    ok(configs(shared_broker, "--alter", "--user", "alice", "--client", "app", "--delete-config", "request_percentage"))
    assert (("client-id", "app"), ("user", "alice")) not in stored(shared_broker)


def test_scram_credentials_through_the_same_command(shared_broker: BrokerProcess) -> None:
    assert ok(configs(shared_broker, "--alter", "--user", "bob", "--add-config",
                      "SCRAM-SHA-256=[iterations=8192,password=bob-secret]")) == \
        ["Completed updating config for user bob."]
    ok(configs(shared_broker, "--alter", "--user", "bob", "--add-config", "producer_byte_rate=2048"))
    assert ok(configs(shared_broker, "--describe", "--entity-type", "users", "--entity-name", "bob")) == [
        "Quota configs for user-principal 'bob' are producer_byte_rate=2048.0",
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192",
    ]


def test_refusals_as_config_command(shared_broker: BrokerProcess) -> None:
    assert "Cannot alter both quota and SCRAM credential configs simultaneously for 'users' using " \
           "--bootstrap-server." in failed(configs(shared_broker, "--alter", "--user", "carol", "--add-config",
                                                   "producer_byte_rate=1024,SCRAM-SHA-512=[password=x]"))
    assert "Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected config names: " \
           "List(SCRAM-SHA-256)" in failed(configs(shared_broker, "--alter", "--client", "c", "--add-config",
                                                   "SCRAM-SHA-256=[password=x]"))
    assert "Only quota and SCRAM credential configs can be added for 'users' using --bootstrap-server. " \
           "Unexpected config names: List(retention.ms)" in failed(
               configs(shared_broker, "--alter", "--user", "carol", "--add-config", "retention.ms=1"))
    assert "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials" in failed(
        configs(shared_broker, "--alter", "--user-defaults", "--add-config", "SCRAM-SHA-256=[password=x]"))
    assert "Cannot parse quota configuration value for producer_byte_rate: fast" in failed(
        configs(shared_broker, "--alter", "--user", "carol", "--add-config", "producer_byte_rate=fast"))
    assert failed(configs(shared_broker, "--alter", "--user", "carol", "--add-config", "producer_byte_rate=0")) == \
        ERROR + "InvalidRequestException: Quota producer_byte_rate must be greater than 0"
    assert "Only 'users' and 'clients' entity types may be specified together" in failed(
        configs(shared_broker, "--describe", "--entity-type", "users", "--entity-type", "topics"))
    assert "Duplicate entity type(s) specified: users" in failed(
        configs(shared_broker, "--describe", "--entity-type", "users", "--entity-type", "users"))
    assert "--entity-{type,name,default} should not be used in conjunction with specific entity flags" in failed(
        configs(shared_broker, "--describe", "--entity-type", "users", "--client", "app"))
    assert "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips" in \
        failed(configs(shared_broker, "--alter", "--entity-type", "clients", "--add-config", "producer_byte_rate=1"))
    assert "Exactly one entity name must be specified for every entity type" in failed(
        configs(shared_broker, "--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "x",
                "--add-config", "producer_byte_rate=1"))
    assert (("user", "carol"),) not in stored(shared_broker)


def test_quotas_kept_across_a_single_node_restart(tmp_path) -> None:
    broker = BrokerProcess(tmp_path).start()
    try:
        ok(configs(broker, "--alter", "--user", "dave", "--client", "etl", "--add-config", "producer_byte_rate=4096"))
        ok(configs(broker, "--alter", "--user", "dave", "--add-config", "SCRAM-SHA-512=[password=dave-secret]"))
        broker.kill()
        broker.start()
        assert ok(configs(broker, "--describe", "--user", "dave", "--client", "etl")) == \
            ["Quota configs for user-principal 'dave', client-id 'etl' are producer_byte_rate=4096.0"]
        assert ok(configs(broker, "--describe", "--user", "dave")) == \
            ["SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-512=iterations=4096"]
    finally:
        broker.kill()
