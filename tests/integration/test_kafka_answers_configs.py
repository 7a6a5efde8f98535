"""Config and topic-admin answers as Apache Kafka gives them, read through real clients."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from pybroker.common.config import CONFIG_KEYS
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def test_create_topics_success_has_a_null_error_message(shared_broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        result = admin.create_topics({"answers-created": {"num_partitions": 1, "replication_factor": 1}})
    finally:
        admin.close()
    [topic] = result["topics"]
    assert (topic["name"], topic["error_code"], topic["error_message"]) == ("answers-created", 0, None)


def test_describe_configs_messages_and_key_filter_as_kafka(shared_broker: BrokerProcess) -> None:
    """Kafka sends "" (not a sentence) for an unknown topic, and an empty key list means every key."""
    client = WireClient(shared_broker.bootstrap)
    unknown = DescribeConfigsRequest.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name="no-such",
                                                            configuration_keys=None)
    broker = DescribeConfigsRequest.DescribeConfigsResource(resource_type=BROKER_RESOURCE, resource_name="0",
                                                           configuration_keys=[])
    answer = client.request(DescribeConfigsRequest(resources=[unknown, broker]), 4, DescribeConfigsResponse)
    client.close()
    missing, described = answer.results
    assert (missing.error_code, missing.error_message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "")
    assert (described.error_code, described.error_message) == (0, "")
    assert "log.retention.hours" in {c.name for c in described.configs}


def test_find_coordinator_messages_as_kafka(shared_broker: BrokerProcess) -> None:
    """v1-3 carry Errors.NONE.message() ("NONE"); v4+ coordinators carry no message ("")."""
    client = WireClient(shared_broker.bootstrap)
    old = client.request(FindCoordinatorRequest(key="answers-find", key_type=0), 3, FindCoordinatorResponse)
    new = client.request(FindCoordinatorRequest(coordinator_keys=["answers-find"], key_type=0), 4,
                         FindCoordinatorResponse)
    client.close()
    assert (old.error_code, old.error_message) == (0, "NONE")
    assert (new.coordinators[0].error_code, new.coordinators[0].error_message) == (0, "")


def test_subtract_may_leave_a_list_config_empty(shared_broker: BrokerProcess) -> None:
    admin = _admin(shared_broker)
    admin.create_topics([NewTopic("answers-subtract", 1, 1, config={"cleanup.policy": "compact"})])["answers-subtract"] \
        .result(10)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "answers-subtract", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "answers-subtract")])
    configs = next(iter(described.values())).result(10)
    assert configs["cleanup.policy"].value == ""
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_append_starts_from_the_default_value(shared_broker: BrokerProcess) -> None:
    """Kafka appends to the effective value: the broker default when the topic has no override."""
    admin = _admin(shared_broker)
    admin.create_topics([NewTopic("answers-append", 1, 1)])["answers-append"].result(10)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "answers-append", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "answers-append")])
    assert next(iter(described.values())).result(10)["cleanup.policy"].value == "delete,compact"


def test_broker_configs_read_only_source_and_synonyms(shared_broker: BrokerProcess) -> None:
    """read_only is Kafka's `!DynamicBrokerConfig.AllDynamicConfigs.contains(name)`; the sources are
    STATIC_BROKER_CONFIG for keys in server.properties, DEFAULT_CONFIG otherwise."""
    admin = _admin(shared_broker)
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(10)
    read_only = {name: entry.is_read_only for name, entry in configs.items()}
    assert read_only["advertised.listeners"] is True
    assert read_only["broker.id"] is True
    assert read_only["log.retention.hours"] is True  # only the primary synonym log.retention.ms is dynamic
    assert read_only["log.retention.ms"] is False
    assert read_only["listeners"] is False
    assert read_only["num.io.threads"] is False
    assert read_only["message.max.bytes"] is False
    # Password keys (the ssl.* stores, sasl.jaas.config) are sensitive, their values never sent, as in Kafka.
    sensitive = {name for name, entry in configs.items() if entry.is_sensitive}
    assert {"sasl.jaas.config", "ssl.key.password", "ssl.keystore.key"} <= sensitive
    assert sensitive == {name for name, key in CONFIG_KEYS.items() if key.type == "password"} & set(configs)
    assert all(configs[name].value is None for name in sensitive)
    assert configs["listeners"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["num.io.threads"].source == ConfigSource.DEFAULT_CONFIG.value


def test_broker_config_synonyms_as_kafka(shared_broker: BrokerProcess) -> None:
    """Kafka's ConfigHelper.configSynonyms: static then default entries of every synonym of the key,
    dropping those before the first one with the key's own name."""
    client = WireClient(shared_broker.bootstrap)
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name="0",
        configuration_keys=["listeners", "log.retention.ms", "log.retention.hours", "log.dirs"])
    answer = client.request(DescribeConfigsRequest(resources=[resource], include_synonyms=True), 4,
                            DescribeConfigsResponse)
    client.close()
    synonyms = {c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in answer.results[0].configs}
    static, default = ConfigSource.STATIC_BROKER_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value
    assert synonyms["listeners"] == [("listeners", shared_broker.overrides["listeners"], static),
                                     ("listeners", "PLAINTEXT://:9092", default)]
    assert synonyms["log.retention.ms"] == []  # null defaults are not listed, and the hours one comes later
    assert synonyms["log.retention.hours"] == [("log.retention.hours", "168", default)]
    assert synonyms["log.dirs"][0][2] == static


def test_describe_configs_for_the_cluster_default_resource_is_empty(shared_broker: BrokerProcess) -> None:
    """An empty broker name describes the dynamic cluster-wide defaults: none on a static broker."""
    client = WireClient(shared_broker.bootstrap)
    resource = DescribeConfigsRequest.DescribeConfigsResource(resource_type=BROKER_RESOURCE, resource_name="",
                                                             configuration_keys=None)
    answer = client.request(DescribeConfigsRequest(resources=[resource]), 4, DescribeConfigsResponse)
    client.close()
    assert (answer.results[0].error_code, answer.results[0].configs) == (0, [])


def test_every_key_the_properties_set_is_described_as_static(tmp_path: Path) -> None:
    """Kafka describes a broker's originals as well as its declared keys (ConfigHelper.allConfigs): a
    listener override or a key Kafka does not declare (a plugin's) is STATIC_BROKER_CONFIG; one of
    unknown type is sensitive, its value hidden. Read with kafka-python's admin, as a user would."""
    broker = BrokerProcess(tmp_path, {"listener.name.plaintext.ssl.keystore.type": "PKCS12",
                                      "my.plugin.secret": "s3cret", "num.partitions": "3"}).start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_configs([KafkaConfigResource(ConfigResourceType.BROKER, "0")],
                                           config_filter="static")
    finally:
        admin.close()
        broker.kill()
    configs = described["broker"]["0"]
    assert configs["num.partitions"]["value"] == "3"
    override = configs["listener.name.plaintext.ssl.keystore.type"]
    assert (override["value"], override["is_sensitive"], override["config_type"]) == ("PKCS12", False, "STRING")
    plugin = configs["my.plugin.secret"]
    assert (plugin["value"], plugin["is_sensitive"], plugin["read_only"]) == (None, True, True)
    assert all(entry["config_source"] == "STATIC_BROKER_CONFIG" for entry in configs.values())
