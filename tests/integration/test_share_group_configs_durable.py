"""Share group configs are dynamic configs of the group, as in Kafka: a single-node broker keeps them across a
restart, and ListConfigResources lists the groups that have them."""

from __future__ import annotations

from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

GROUP = 32
SET, DELETE = 0, 1
DYNAMIC_GROUP_CONFIG = 8


def alter_group(wire: WireClient, group: str, configs: dict[str, str | None]) -> int:
    """IncrementalAlterConfigs on one GROUP resource, sent to exactly the broker ``wire`` talks to."""
    ops = [IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=DELETE if v is None else SET,
                                                          value=v) for k, v in configs.items()]
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=GROUP, resource_name=group, configs=ops)], validate_only=False)
    [result] = wire.request(request, 1, IncrementalAlterConfigsResponse).responses
    return int(result.error_code)


def group_overrides(wire: WireClient, group: str) -> dict[str, str]:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=GROUP, resource_name=group, configuration_keys=None)])
    [result] = wire.request(request, 4, DescribeConfigsResponse).results
    assert result.error_code == ErrorCode.NONE
    return {c.name: c.value for c in result.configs if c.config_source == DYNAMIC_GROUP_CONFIG}


def listed_groups(wire: WireClient) -> set[str]:
    response = wire.request(ListConfigResourcesRequest(resource_types=[GROUP]), 1, ListConfigResourcesResponse)
    assert response.error_code == ErrorCode.NONE
    return {r.resource_name for r in response.config_resources}


def test_group_configs_survive_a_restart_and_are_listed(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path).start()
    try:
        wire = WireClient(broker.bootstrap)
        assert alter_group(wire, "durable-group", {"share.auto.offset.reset": "earliest",
                                                   "share.record.lock.duration.ms": "20000"}) == ErrorCode.NONE
        assert alter_group(wire, "emptied-group", {"share.auto.offset.reset": "earliest"}) == ErrorCode.NONE
        assert alter_group(wire, "emptied-group", {"share.auto.offset.reset": None}) == ErrorCode.NONE
        assert listed_groups(wire) == {"durable-group"}
        broker.stop()
        broker.start()
        wire = WireClient(broker.bootstrap)
        assert group_overrides(wire, "durable-group") == {"share.auto.offset.reset": "earliest",
                                                          "share.record.lock.duration.ms": "20000"}
        assert group_overrides(wire, "emptied-group") == {}
        assert listed_groups(wire) == {"durable-group"}
    finally:
        broker.kill()
