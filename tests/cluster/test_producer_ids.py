"""Producer-id blocks come from the controller (AllocateProducerIds, KIP-730): it alone writes
/latest_producer_id_block, refuses brokers it does not know or whose epoch is not current, and a
non-controller answers NOT_CONTROLLER. Idempotent producers on every broker get distinct ids, also
after the controller moves."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from confluent_kafka import Producer
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pybroker.client.connection import Connection
from pybroker.zk import paths as zp
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from tests.eventually import eventually
from tests.cluster.conftest import Cluster, running_cluster


def zk_read(cluster: Cluster, path: str) -> tuple[bytes, int]:
    zk = KazooClient(cluster.zk_connect)
    zk.start(10)
    try:
        data, stat = zk.get(path)
        return data, stat.czxid
    finally:
        zk.stop()
        zk.close()


def controller_of(cluster: Cluster) -> int:
    """-1 between a controller's loss and the next election."""
    try:
        return json.loads(zk_read(cluster, zp.CONTROLLER)[0])["brokerid"]
    except NoNodeError:
        return -1


def send(port: int, request, version: int, response_type):
    async def run():
        connection = await Connection.open("127.0.0.1", port, client_id="producer-id-test", timeout=10)
        try:
            return await connection.send_at(request, version, response_type)
        finally:
            await connection.close()
    return asyncio.run(run())


def init_producer_id(port: int) -> int:
    response = send(port, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4,
                    InitProducerIdResponse)
    assert response.error_code == ErrorCode.NONE
    return response.producer_id


def test_producer_id_blocks_come_from_the_controller(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        controller = controller_of(cluster)
        other = next(b for b in range(3) if b != controller)
        ids = {broker_id: init_producer_id(cluster.brokers[broker_id].port) for broker_id in range(3)}
        assert len(set(ids.values())) == 3
        block = zp.decode_producer_id_block(zk_read(cluster, zp.PRODUCER_ID_BLOCK)[0])
        assert block is not None and block.end == 2999  # three blocks of 1,000, one per broker

        other_epoch = zk_read(cluster, zp.broker_path(other))[1]
        controller_port = cluster.brokers[controller].port
        answers = [send(port, AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch), 0,
                        AllocateProducerIdsResponse)
                   for port, broker_id, epoch in ((cluster.brokers[other].port, other, other_epoch),
                                                  (controller_port, other, other_epoch - 1),
                                                  (controller_port, 42, other_epoch),
                                                  (controller_port, other, other_epoch))]
        assert [a.error_code for a in answers] == [ErrorCode.NOT_CONTROLLER, ErrorCode.STALE_BROKER_EPOCH,
                                                   ErrorCode.BROKER_ID_NOT_REGISTERED, ErrorCode.NONE]
        assert (answers[3].producer_id_start, answers[3].producer_id_len) == (3000, 1000)
        stored = zp.decode_producer_id_block(zk_read(cluster, zp.PRODUCER_ID_BLOCK)[0])
        assert stored == zp.ProducerIdBlock(other, 3000, 3999)

        cluster.brokers[controller].kill()
        eventually(lambda: controller_of(cluster) not in (controller, -1), "a new controller", timeout=30)
        survivors = [b for b in range(3) if b != controller]
        after = [init_producer_id(cluster.brokers[b].port) for b in survivors for _ in range(2)]
        assert len(set(after)) == len(after) and not set(after) & set(ids.values()) \
            and not any(3000 <= i <= 3999 for i in after)

        delivered = []
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
        producer.produce("producer-ids", b"v", on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0 and delivered == [None]
