"""The web console end to end: a real broker, `pybroker console` processes, and headless chromium clicking
through the pages as a person would. Each page's screenshot is saved in tests/console/screenshots/."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest
from confluent_kafka import Consumer

from pybroker.client import AdminClient, KafkaClient, NewTopic, Producer
from pybroker.client.groups import GroupAdmin
from pybroker.common.topic import TopicPartition
from pybroker.records import RecordInput
from tests.console.conftest import ConsoleProcess, free_port
from tests.integration.broker_process import BrokerProcess

DEADLINE_S = 60.0  # page polls on a loaded 2-core machine (CI beside other work) took over 30 s
OLD_TIMESTAMP = 1_600_000_000_000


@pytest.fixture(scope="module")
def consoles(console_broker: BrokerProcess, start_console: Callable[..., ConsoleProcess],
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, ConsoleProcess]:
    """A writable and a read-only console on the broker, one asking for a password, and one whose cluster is not
    there: started together."""
    config = tmp_path_factory.mktemp("console") / "console.properties"
    config.write_text("console.password=s3cret\n")
    started = {
        "login": start_console("--bootstrap-server", console_broker.bootstrap, "--command-config", str(config)),
        "writable": start_console("--bootstrap-server", console_broker.bootstrap, "--allow-writes",
                                  "--sample-interval", "1"),
        "read_only": start_console("--bootstrap-server", console_broker.bootstrap),
        "unreachable": start_console("--bootstrap-server", f"127.0.0.1:{free_port()}", "--command-timeout", "1000"),
    }
    return {name: console.wait_ready() for name, console in started.items()}


def run(bootstrap: str, operation):  # type: ignore[no-untyped-def]
    """Our client's ``operation`` on the cluster, in a thread: Playwright's sync API owns this thread's loop."""
    async def go():  # type: ignore[no-untyped-def]
        async with KafkaClient(bootstrap) as client:
            return await operation(client)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result()


def confirm_write(page, form: str, fields: dict[str, str]) -> str:  # type: ignore[no-untyped-def]
    """Fill and submit a form, confirm on the confirmation page, and return the notice or error shown."""
    for name, value in fields.items():
        field = page.locator(f"{form} [name={name}]")
        if field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(value)
        elif field.get_attribute("type") == "checkbox":
            field.check()
        else:
            field.fill(value)
    page.locator(f"{form} button").first.click()
    page.locator("#confirm").click()
    page.wait_for_load_state()
    if page.locator("#notice").count():
        return page.locator("#notice").inner_text()
    return page.locator("#error").inner_text()


def poll_page(page, url: str, condition: Callable[[], bool]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        page.goto(url)
        if condition():
            return
        assert time.monotonic() < deadline, \
            f"{url} never showed what was expected; it showed:\n{page.locator('body').inner_text()[:2000]}"
        time.sleep(0.3)


def snap(page, screenshots: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    """Save the page's screenshot; chromium now and then fails to capture one on a loaded machine: try again."""
    for attempt in range(3):
        try:
            page.screenshot(path=screenshots / f"{name}.png", full_page=True)
            return
        except Exception:
            if attempt == 2:
                raise


def messages_shown(page) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    return [{"offset": row.locator(".offset").inner_text(), "key": row.locator(".key").inner_text(),
             "value": row.locator(".value").inner_text(), "headers": row.locator(".headers").inner_text()}
            for row in page.locator("tr.message").all()]


def test_topic_lifecycle_and_message_browser(consoles, console_broker, page, screenshots: Path) -> None:
    url = consoles["writable"].url
    page.goto(f"{url}/topics")
    assert confirm_write(page, "#create-topic", {"name": "e2e-topic", "partitions": "2"}) == "Created topic e2e-topic."
    page.fill("#search", "e2e")
    page.click("#search + button")
    assert page.locator("#topics a", has_text="e2e-topic").count() == 1
    snap(page, screenshots, "topics")

    page.goto(f"{url}/topics/e2e-topic/messages")
    assert confirm_write(page, "#produce", {"partition": "1", "key": "k1", "value": '{"a": [1, 2]}',
                                            "headers": "trace=abc\nsource=console"}) \
        == "Produced to partition 1 at offset 0."
    assert confirm_write(page, "#produce", {"partition": "1", "value": "<script>window.injected = 1</script>"}) \
        == "Produced to partition 1 at offset 1."

    async def produce_more(client: KafkaClient) -> None:
        producer = Producer(client)
        await producer.send({TopicPartition("e2e-topic", 0): [
            RecordInput(b"\xff\x00binary", b"old", timestamp=OLD_TIMESTAMP),
            RecordInput(b"late", b"newer", timestamp=OLD_TIMESTAMP + 60_000),
            RecordInput(b"big", b"x" * 5000)]})
    run(console_broker.bootstrap, produce_more)

    page.goto(f"{url}/topics/e2e-topic/messages?partition=1&mode=offset&offset=0&limit=1")
    [found] = messages_shown(page)
    assert found["key"] == "k1" and found["offset"] == "0"
    assert found["value"] == '{\n  "a": [\n    1,\n    2\n  ]\n}'  # pretty-printed JSON
    assert "trace: abc" in found["headers"] and "source: console" in found["headers"]

    page.goto(f"{url}/topics/e2e-topic/messages?partition=0&mode=timestamp&timestamp={OLD_TIMESTAMP + 1}&limit=1")
    [found] = messages_shown(page)
    assert (found["offset"], found["key"], found["value"]) == ("1", "late", "newer")

    page.goto(f"{url}/topics/e2e-topic/messages?mode=oldest")
    shown = {m["key"]: m for m in messages_shown(page)}
    assert len(shown) == 5 and list(shown)[:2] == ["ff 00 62 69 6e 61 72 79", "late"]  # binary key as hex; by time
    assert shown["null"]["value"] == "<script>window.injected = 1</script>"  # shown as text
    assert page.evaluate("window.injected") is None  # and never run
    assert len(shown["big"]["value"]) < 5000
    snap(page, screenshots, "messages")
    page.click("a.show-all")
    assert page.locator("#value").inner_text() == "x" * 5000
    snap(page, screenshots, "message")

    page.goto(f"{url}/topics/e2e-topic/messages?filter=TRACE")
    assert [m["key"] for m in messages_shown(page)] == ["k1"]

    page.goto(f"{url}/topics/e2e-topic")
    assert confirm_write(page, "#set-config", {"key": "retention.ms", "value": "123456"}) == "Set retention.ms=123456."
    page.goto(f"{url}/topics/e2e-topic")
    overridden = page.locator("#configs tr").nth(1)  # overrides come first
    assert "123456" in overridden.inner_text() and "overridden" in overridden.inner_text()
    assert confirm_write(page, "#add-partitions", {"count": "3"}) == "Topic e2e-topic now has 3 partitions."
    page.goto(f"{url}/topics/e2e-topic")
    assert page.locator("#partitions tr").count() == 4  # header and three partitions
    snap(page, screenshots, "topic")
    assert confirm_write(page, "#add-partitions", {"count": "2"}) \
        == "Topic currently has 3 partitions, which is higher than the requested 2."  # the broker's own text

    page.goto(f"{url}/topics/e2e-topic")
    page.click("#delete-topic button")
    snap(page, screenshots, "confirm-delete")
    page.click("#confirm")
    assert page.locator("#notice").inner_text() == "Deleted topic e2e-topic."
    assert page.locator("#topics a", has_text="e2e-topic").count() == 0


def test_group_lag_rises_and_falls_then_reset(consoles, console_broker, page, screenshots: Path) -> None:
    url, bootstrap = consoles["writable"].url, console_broker.bootstrap
    topic, group = "lag-topic", "lag-group"

    async def prepare(client: KafkaClient) -> None:
        (await AdminClient(client).create_topics([NewTopic(topic, 1, 1)]))[topic].raise_error()
        await GroupAdmin(client).commit_offsets(group, {TopicPartition(topic, 0): 0})
        await Producer(client).send({TopicPartition(topic, 0): [RecordInput(None, b"m%d" % i) for i in range(30)]})
    run(bootstrap, prepare)

    def lag_is(expected: str) -> Callable[[], bool]:
        return lambda: page.locator("#total-lag").all_inner_texts() == [expected]

    poll_page(page, f"{url}/groups/{group}", lag_is("30"))  # the lag has risen
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        consumed = 0
        deadline = time.monotonic() + DEADLINE_S
        while consumed < 30 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                consumed += 1
        consumer.commit(asynchronous=False)
        poll_page(page, f"{url}/groups/{group}",
                  lambda: lag_is("0")() and page.locator("#state").all_inner_texts() == ["Stable"])  # and fallen
        assert page.locator("#members tr").count() == 2
        snap(page, screenshots, "group")
        poll_page(page, f"{url}/charts", lambda: page.locator("#chart-lag svg polyline").count() > 0)
        snap(page, screenshots, "charts")
        # While the consumer runs, the reset is refused with Kafka's reason.
        page.goto(f"{url}/groups/{group}")
        page.locator("#reset [name=to]").select_option("earliest")
        page.click("#reset button")
        assert "can only be reset if the group 'lag-group' is inactive" in page.locator("#error").inner_text()
    finally:
        consumer.close()

    poll_page(page, f"{url}/groups", lambda: "Empty" in " ".join(page.locator("#groups").all_inner_texts()))
    row = page.locator("#groups tr", has_text=group).inner_text()
    assert "classic" in row and "consumer" in row  # its type (KIP-848) and its protocol type
    snap(page, screenshots, "groups")
    page.goto(f"{url}/groups/{group}")
    page.locator("#reset [name=to]").select_option("offset")
    page.fill("#reset [name=value]", "10")
    page.click("#reset button")
    assert page.locator("#preview td").all_inner_texts() == [topic, "0", "10"]  # the preview
    snap(page, screenshots, "reset-preview")
    page.click("#confirm")
    assert page.locator("#notice").inner_text() == f"Reset 1 offsets of group {group}."
    assert page.locator("#total-lag").inner_text() == "20"

    assert confirm_write(page, "#delete-group", {}) == f"Deleted group {group}."
    assert page.locator("#groups a", has_text=group).count() == 0


def test_overview_and_security_pages(consoles, console_broker, page, screenshots: Path) -> None:
    url = consoles["writable"].url
    page.goto(url)
    broker_row = page.locator("#brokers tr").nth(1).inner_text()
    assert console_broker.bootstrap in broker_row and "yes" in broker_row  # the single broker is the controller
    assert "/logs: " in broker_row and "free" in broker_row  # DescribeLogDirs: its dir, replica bytes and volume
    page.locator("details").first.click()
    assert page.locator("details table", has_text="Produce").count() >= 1
    snap(page, screenshots, "overview")

    page.goto(f"{url}/acls")
    assert confirm_write(page, "#add-acl", {"resource_type": "TOPIC", "resource_name": "<i>t",
                                            "principal": "User:alice", "operation": "READ"}) == "Added the ACL."
    row = page.locator("#acls tr").nth(1)
    assert row.locator("td").all_inner_texts()[:7] == ["TOPIC", "<i>t", "LITERAL", "User:alice", "*", "READ",
                                                       "ALLOW"]
    snap(page, screenshots, "acls")
    row.locator("button").click()
    page.click("#confirm")
    assert page.locator("#notice").inner_text() == "Removed 1 ACL(s)."
    assert page.locator("#acls tr").count() == 1
    refusal = confirm_write(page, "#add-acl", {"resource_type": "CLUSTER", "resource_name": "x",
                                               "principal": "User:bob", "operation": "ALTER"})
    assert refusal == "The only valid name for the CLUSTER resource is kafka-cluster"
    page.goto(f"{url}/users")
    assert confirm_write(page, "#alter-user", {"user": "alice", "mechanism": "SCRAM-SHA-256", "password": "pw"}) \
        == "Set SCRAM-SHA-256 credentials of alice."
    assert "alice" in page.locator("#users").inner_text()
    snap(page, screenshots, "users")


def test_read_only_console_refuses_writes(consoles, console_broker, page, screenshots: Path) -> None:
    page.goto(f"{consoles['read_only'].url}/topics")
    page.fill("#create-topic [name=name]", "never-created")
    page.click("#create-topic button")
    assert "read-only" in page.locator("#error").inner_text()
    snap(page, screenshots, "read-only")
    assert "never-created" not in run(console_broker.bootstrap, lambda c: AdminClient(c).list_topics())


def test_unreachable_cluster_shows_a_banner(consoles, page, screenshots: Path) -> None:
    for path in ("/", "/topics", "/groups", "/topics/anything/messages"):
        response = page.goto(consoles["unreachable"].url + path)
        assert response is not None and response.status == 503
        assert "Cannot reach the cluster" in page.locator("#unreachable").inner_text()
        assert "Traceback" not in page.content()
    snap(page, screenshots, "unreachable")


def test_login_with_the_configured_password(consoles, page, screenshots: Path) -> None:
    url = consoles["login"].url
    page.goto(f"{url}/topics")
    assert page.url == f"{url}/login"
    page.fill("[name=password]", "wrong")
    page.click("#login")
    assert page.locator("#error").inner_text() == "Wrong password."
    snap(page, screenshots, "login")
    page.fill("[name=password]", "s3cret")
    page.click("#login")
    assert page.url == f"{url}/" and page.locator("#brokers").count() == 1
