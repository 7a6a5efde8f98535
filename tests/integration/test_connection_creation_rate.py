"""KIP-612 connection creation rates: the ``connection_creation_rate`` quota of ``ips`` entities (set
and described with the quota APIs and ``pybroker configs --entity-type ips``) closes a burst's extra
connections from one address unserved, and ``max.connection.creation.rate`` (here per listener)
makes the acceptor wait instead of refusing. A client holding to a byte-rate quota on each of many
connections is what these bound: opening the connections is now the limit."""

from __future__ import annotations

import asyncio
from typing import Any


from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from pybroker.client.wire import ClientWire
from pybroker.protocol.schema import Message
from tests.cluster.test_inter_broker_guard import connect
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_cli_topics import failed, ok, run
from tests.integration.test_metrics import METRICS_URL, scrape

BURST = 40


ADMIN_SOURCE = "127.0.0.3"  # the admin's connections come from an address no test throttles


def alter_ip(broker: BrokerProcess, ip: str | None, rate: float | None) -> AlterClientQuotasResponse.EntryData:
    request = AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntityData(entity_type="ip", entity_name=ip)],
        ops=[AlterClientQuotasRequest.OpData(key="connection_creation_rate", value=rate or 0.0,
                                             remove=rate is None)])])
    return asyncio.run(admin(broker, request, AlterClientQuotasResponse)).entries[0]


async def admin(broker: BrokerProcess, request: Message, response_type: type) -> Any:
    assert broker.port is not None
    connection = await connect(broker.port, ADMIN_SOURCE)
    try:
        return await connection.send_at(request, 1, response_type)
    finally:
        await connection.close()


async def served(port: int, source: str) -> bool:
    """Whether a new connection from ``source`` is answered (a throttled one is closed unanswered)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        _, frame = ClientWire("burst").encode_request(ApiVersionsRequest(), 0)
        writer.write(frame)
        return len(await reader.read(4)) == 4
    except ConnectionError:
        return False
    finally:
        writer.close()


async def burst(port: int, source: str, count: int) -> int:
    """How many of ``count`` connections opened at once from ``source`` are answered."""
    return sum(await asyncio.gather(*(served(port, source) for _ in range(count))))


def test_ip_quotas_are_set_described_and_close_a_burst_past_them(shared_broker: BrokerProcess) -> None:
    assert alter_ip(shared_broker, "127.0.0.1", 1).error_code == ErrorCode.NONE
    assert alter_ip(shared_broker, None, 1000).error_code == ErrorCode.NONE  # the default for other addresses
    refused = alter_ip(shared_broker, "not-an-ip.invalid", 1)
    assert (refused.error_code, refused.error_message) == \
        (ErrorCode.INVALID_REQUEST, "not-an-ip.invalid is not a valid IP or resolvable host.")
    described = asyncio.run(admin(shared_broker, DescribeClientQuotasRequest(components=[
        DescribeClientQuotasRequest.ComponentData(entity_type="ip", match_type=2, match=None)], strict=False),
        DescribeClientQuotasResponse))
    combined = asyncio.run(admin(shared_broker, DescribeClientQuotasRequest(components=[
        DescribeClientQuotasRequest.ComponentData(entity_type="ip", match_type=2, match=None),
        DescribeClientQuotasRequest.ComponentData(entity_type="user", match_type=2, match=None)], strict=False),
        DescribeClientQuotasResponse))
    assert {(e.entity_type, e.entity_name, v.key, v.value) for entry in described.entries for e in entry.entity
            for v in entry.values} == {("ip", "127.0.0.1", "connection_creation_rate", 1.0),
                                       ("ip", None, "connection_creation_rate", 1000.0)}  # the default is one too
    assert combined.error_code == ErrorCode.INVALID_REQUEST
    port = shared_broker.port
    assert port is not None
    answered = asyncio.run(burst(port, "127.0.0.1", BURST))
    assert 0 < answered < BURST / 2, answered  # a fresh address gets about quota.window.num - 1 seconds' worth
    assert asyncio.run(burst(port, "127.0.0.2", BURST)) == BURST  # another address: the default quota
    assert alter_ip(shared_broker, "127.0.0.1", None).error_code == ErrorCode.NONE
    assert asyncio.run(burst(port, "127.0.0.1", 5)) == 5
    assert "Traceback" not in shared_broker.log_text()


def test_pybroker_configs_alters_and_describes_ips(shared_broker: BrokerProcess) -> None:
    def configs(*args: str) -> list[str]:
        return ok(run("configs", "--bootstrap-server", shared_broker.bootstrap, *args))

    assert configs("--entity-type", "ips", "--entity-name", "127.0.0.9", "--alter", "--add-config",
                   "connection_creation_rate=100") == ["Completed updating config for ip 127.0.0.9."]
    assert configs("--ip-defaults", "--alter", "--add-config", "connection_creation_rate=200") == \
        ["Completed updating default config for ips in the cluster."]
    assert configs("--entity-type", "ips", "--entity-name", "127.0.0.9", "--describe") == \
        ["Quota configs for ip '127.0.0.9' are connection_creation_rate=100.0"]
    assert configs("--entity-type", "ips", "--entity-default", "--describe") == \
        ["Quota configs for the default ip are connection_creation_rate=200.0"]
    assert configs("--ip", "127.0.0.9", "--alter", "--delete-config", "connection_creation_rate") == \
        ["Completed updating config for ip 127.0.0.9."]
    assert configs("--entity-type", "ips", "--entity-name", "127.0.0.9", "--describe") == []
    bad_key = run("configs", "--bootstrap-server", shared_broker.bootstrap, "--entity-type", "ips", "--entity-name",
                  "127.0.0.9", "--alter", "--add-config", "producer_byte_rate=10")
    assert "Only connection quota configs can be added for 'ips' using --bootstrap-server. Unexpected config " \
           "names: producer_byte_rate" in failed(bad_key)
    bad_name = run("configs", "--bootstrap-server", shared_broker.bootstrap, "--entity-type", "ips", "--entity-name",
                   "no.such.host.invalid", "--alter", "--add-config", "connection_creation_rate=1")
    assert "The entity name for ips must be a valid IP or resolvable host, but it is: no.such.host.invalid" in \
        failed(bad_name)
    alter_ip(shared_broker, None, None)


def test_a_listener_creation_rate_delays_accepting_instead_of_refusing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broker = BrokerProcess(tmp_path, {"listener.name.plaintext.max.connection.creation.rate": "5",
                                      "quota.window.num": "2", "metrics.port": "0"}).start()
    try:
        assert broker.port is not None
        assert asyncio.run(burst(broker.port, "127.0.0.1", 20)) == 20
        url = METRICS_URL.search(broker.log_text()).group(1)  # type: ignore[union-attr]
        delayed = scrape(url)[("kafka_network_socketserver_refusedconnections_total",
                               (("limit", "max.connection.creation.rate"),))]
        assert delayed >= 10, delayed  # the first five went at once, the rest waited their turn
    finally:
        broker.kill()
