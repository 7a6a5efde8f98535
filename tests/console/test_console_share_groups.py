"""Share groups (KIP-932) in the web console: three confluent-kafka ShareConsumers reading a two-partition topic
show up in the groups list as a share group, and its page lists the members, which partitions each reads (several
members per partition), the log end offsets, and the start offsets and lag from DescribeShareGroupOffsets."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from confluent_kafka import ShareConsumer

from pybroker.client import AdminClient, KafkaClient, NewTopic, Producer
from pybroker.common.topic import TopicPartition
from pybroker.protocol.api_keys import ApiKey
from pybroker.records import RecordInput
from tests.console.conftest import ConsoleProcess
from tests.console.test_console_browser import poll_page, run, snap
from tests.integration.broker_process import BrokerProcess

TOPIC, GROUP = "queue-topic", "queue-group"


def test_share_group_members_partitions_and_offsets(console_broker: BrokerProcess,
                                                    start_console: Callable[..., ConsoleProcess],
                                                    page, screenshots: Path) -> None:  # type: ignore[no-untyped-def]
    bootstrap = console_broker.bootstrap
    console = start_console("--bootstrap-server", bootstrap).wait_ready()

    async def prepare(client: KafkaClient) -> bool:
        (await AdminClient(client).create_topics([NewTopic(TOPIC, 2, 1)]))[TOPIC].raise_error()
        await Producer(client).send({TopicPartition(TOPIC, p): [RecordInput(None, b"m%d" % i) for i in range(5 + p)]
                                     for p in (0, 1)})
        return ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS in (await client.connect()).versions.broker
    assert run(bootstrap, prepare), "the broker serves DescribeShareGroupOffsets"

    consumers = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP}) for _ in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe([TOPIC])
            consumer.poll(0.1)
        def listed() -> bool:
            row = page.locator("#groups tr", has_text=GROUP)
            return row.count() == 1 and row.locator("td").all_inner_texts()[:4] == [GROUP, "Stable", "share", "3"]
        poll_page(page, f"{console.url}/groups", listed)
        page.locator("#groups a", has_text=GROUP).click()
        page.wait_for_load_state()
        # Partitions are assigned once the group's coordinator has had their state initialized, which a member's
        # first heartbeat may not wait for (the broker's share coordinator starts with the first share group), and
        # a start offset is stored once the partition's leader first reads the state for a member's fetch.
        def started() -> bool:
            rows = [row.locator("td").all_inner_texts() for row in page.locator("#partitions tr").all()[1:]]
            return len(rows) == 2 and all(cells[2].isdigit() for cells in rows)
        poll_page(page, page.url, started)
        assert page.locator("h1").inner_text() == f"Share group {GROUP}"
        assert page.locator("#state").inner_text() == "Stable"
        assert page.locator("#members tr").count() == 4
        partitions = [row.locator("td").all_inner_texts() for row in page.locator("#partitions tr").all()[1:]]
        assert [(cells[0], cells[1], cells[3]) for cells in partitions] == [(TOPIC, "0", "5"), (TOPIC, "1", "6")]
        assert sum(int(cells[5]) for cells in partitions) >= 3  # every member reads a partition
        assert page.locator("#offsets-note").count() == 0
        assert all(cells[2].isdigit() for cells in partitions)
        snap(page, screenshots, "share-group")
    finally:
        for consumer in consumers:
            consumer.close()
