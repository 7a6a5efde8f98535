"""Three ZooKeeper-mode brokers: client quotas set through one broker (AlterClientQuotas, and pybroker
configs for a user's client; stored in /config/clients and /config/users/<user>/clients with
/config/changes notifications) are described by the others and enforced by the
partition's leader on another broker (throttle_time_ms in its Produce answers), and after every broker
has been restarted it is still described and enforced (read back from ZooKeeper)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from kazoo.client import KazooClient

from pybroker.client.cluster import KafkaClient
from pybroker.client.connection import Connection
from pybroker.client.quota_admin import alter_client_quotas, describe_client_quotas
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.records.record import RecordInput, build_batch
from tests.eventually import eventually
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import create_topic
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_cli_topics import ok, run

TOPIC = "quota-t"
LEADER = 2  # the topic's only replica: its leader on every restart
RATE = 10_240
VALUE = b"q" * 60_000
PAIR = ("--user", "alice", "--client", "app")
PAIR_LINE = "Quota configs for user-principal 'alice', client-id 'app' are consumer_byte_rate=2048.0"


def described(broker: BrokerProcess) -> list:
    """The quotas ``broker`` describes, on a new connection that gives up after 10 s (the wait around it retries)."""
    async def go() -> list:
        async with KafkaClient(broker.bootstrap, timeout=10) as client:
            return await describe_client_quotas(client, [("client-id", "slow")], strict=True)
    return asyncio.run(go())


def produce_throttle_ms(broker: BrokerProcess, client_id: str) -> int | None:
    """throttle_time_ms of one 60 kB Produce by ``client_id`` on a new connection to ``broker``; None
    if the partition refused it (a restarted leader not leading yet)."""
    async def go() -> int | None:
        connection = await Connection.open("127.0.0.1", broker.port or 0, client_id=client_id)
        try:
            answer = await connection.send_at(ProduceRequest(acks=1, timeout_ms=10_000, topic_data=[
                ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(
                    index=0, records=build_batch([RecordInput(None, VALUE)]))])]), 9, ProduceResponse)
        finally:
            await connection.close()
        if answer.responses[0].partition_responses[0].error_code != ErrorCode.NONE:
            return None
        return answer.throttle_time_ms
    return asyncio.run(go())


def wait_for_enforcement(broker: BrokerProcess, what: str) -> None:
    """Produce as "slow" until an answer carries a throttle (a few produces once the quota is known)."""
    return eventually(lambda: (produce_throttle_ms(broker, "slow") or 0) > 0, what, timeout=30)


def wait_for_cluster(cluster: Cluster) -> None:
    for broker in cluster.brokers:
        eventually(lambda: described(broker) == [({"client-id": "slow"}, {"producer_byte_rate": float(RATE)})],
                   f"broker {broker.port} to describe the quota", timeout=30)
        eventually(lambda: ok(run("configs", "--bootstrap-server", broker.bootstrap, "--describe", *PAIR)) ==
                   [PAIR_LINE], f"broker {broker.port} to describe alice's app quota with pybroker configs", timeout=30)


def test_quota_set_on_one_broker_is_described_and_enforced_by_another_and_kept(tmp_path: Path) -> None:
    with running_cluster(tmp_path / "cluster") as cluster:
        create_topic(cluster, TOPIC, 1, assignment=[[LEADER]])
        leader = cluster.brokers[LEADER]
        eventually(lambda: produce_throttle_ms(leader, "slow") == 0, "the leader to take produces")

        async def alter() -> list:
            async with KafkaClient(cluster.brokers[0].bootstrap) as client:
                return await alter_client_quotas(client, [({"client-id": "slow"}, {"producer_byte_rate": RATE})])
        set_at = time.monotonic()
        assert asyncio.run(alter()) == [None]
        assert ok(run("configs", "--bootstrap-server", cluster.brokers[0].bootstrap, "--alter", *PAIR,
                      "--add-config", "consumer_byte_rate=2048")) == ["Completed updating config for user alice."]
        wait_for_cluster(cluster)
        wait_for_enforcement(leader, "the leader (broker 2) to throttle client slow")
        print(f"quota set on broker 0 throttled on broker 2 {time.monotonic() - set_at:.2f}s later")
        assert produce_throttle_ms(leader, "fast") == 0

        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            stored = json.loads(zk.get("/config/clients/slow")[0])
            assert stored["config"] == {"producer_byte_rate": str(RATE)}
            assert json.loads(zk.get("/config/users/alice/clients/app")[0])["config"] == \
                {"consumer_byte_rate": "2048"}
        finally:
            zk.stop()
            zk.close()

        for broker in cluster.brokers:  # every broker down at once, then each back on its own port
            broker.kill()
        for broker in cluster.brokers:
            broker.start()
        wait_for_cluster(cluster)
        wait_for_enforcement(leader, "the restarted leader to throttle client slow")
        assert produce_throttle_ms(leader, "fast") == 0
