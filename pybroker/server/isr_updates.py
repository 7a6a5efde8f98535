"""A leader's ISR change sent to the controller (AlterPartition, KIP-497), as ZooKeeper-mode Kafka
brokers have done since 2.7 instead of writing the partition state znode themselves.

The request carries the leader epoch and the partition epoch (the state znode's version) the leader
knows. The controller's answer is the state now stored: the ISR and its new partition epoch. While
there is no controller, it moves, or it has not seen this broker's registration yet (NOT_CONTROLLER,
STALE_BROKER_EPOCH, a lost connection), the same proposal is sent again with a backoff growing to a
second, for as long as it takes (Kafka's AlterPartitionManager retries as long, and the leader makes no
other ISR change meanwhile); an answer whose first copy was lost is safe to ask for again, since the
controller answers an ISR it already stored with the stored state. A partition-level refusal (FENCED_LEADER_EPOCH,
INELIGIBLE_REPLICA, ...) ends the attempt: the controller moved on and a LeaderAndIsr follows, or the next fetch
or shrink check proposes again.

INVALID_UPDATE_VERSION at the leader epoch still stored says the state znode holds an ISR this leader does not
know, at a newer version: a change of its own that landed while it heard of a lost connection only (the
controller's ZooKeeper write answered so), and that it gave up. No LeaderAndIsr follows an ISR change, so
proposing again from the stale version is refused for good, and the ISR never shrinks nor grows again (Kafka's
leader also waits for a LeaderAndIsr then; its ZooKeeper-era leader, which wrote the znode itself, was stuck
the same way: KAFKA-2729). The leader reads the state znode instead and takes its ISR and version, from which
the next fetch or shrink check proposes again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from kazoo.exceptions import KazooException

from pybroker.client.errors import KafkaClientError
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from pybroker.protocol.schema import Message
from pybroker.zk import paths as zp
from pybroker.zk.client import ZkClient

log = logging.getLogger("pybroker.replication")
AskController = Callable[[Message, int, type[AlterPartitionResponse], str],
                         Awaitable["tuple[int, AlterPartitionResponse] | None"]]
VERSION = 1  # topic names; the controller answers every version in the spec
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.1, 1.0


class AlterPartitionIsrWriter:
    """The replica manager's `IsrWriter` in ZooKeeper mode."""

    def __init__(self, ask_controller: AskController, broker_id: int, broker_epoch: Callable[[], int],
                 zk: ZkClient) -> None:
        self._ask = ask_controller
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._zk = zk

    async def __call__(self, topic: str, partition: int, *, leader: int, leader_epoch: int, isr: tuple[int, ...],
                       controller_epoch: int, zk_version: int) -> tuple[tuple[int, ...], int] | None:
        backoff, attempts = FIRST_BACKOFF_S, 0
        while True:
            request = AlterPartitionRequest(broker_id=self._broker_id, broker_epoch=self._broker_epoch(), topics=[
                AlterPartitionRequest.TopicData(topic_name=topic, partitions=[AlterPartitionRequest.PartitionData(
                    partition_index=partition, leader_epoch=leader_epoch, new_isr=list(isr),
                    partition_epoch=zk_version)])])
            try:
                answer = await self._ask(request, VERSION, AlterPartitionResponse, "alter-partition")
            except (KafkaClientError, OSError, asyncio.TimeoutError) as exc:
                answer, problem = None, repr(exc)
            else:
                problem = "no controller"
            if answer is not None:
                controller_id, response = answer
                if response.error_code == ErrorCode.NONE:
                    if response.topics[0].partitions[0].error_code == ErrorCode.INVALID_UPDATE_VERSION:
                        return await self._stored(topic, partition, leader_epoch)
                    return self._adopt(topic, partition, leader_epoch, response)
                problem = f"{ErrorCode(response.error_code).name} from controller {controller_id}"
            attempts += 1
            if attempts % 10 == 0:
                log.warning("ISR change of %s-%d to %s still not accepted after %d attempts: %s", topic, partition,
                            list(isr), attempts, problem)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    @staticmethod
    def _adopt(topic: str, partition: int, leader_epoch: int, response: AlterPartitionResponse
               ) -> tuple[tuple[int, ...], int] | None:
        answer = response.topics[0].partitions[0]
        if answer.error_code != ErrorCode.NONE:
            log.info("ISR change of %s-%d refused: %s", topic, partition, ErrorCode(answer.error_code).name)
            return None
        if answer.leader_epoch != leader_epoch:
            return None  # leadership moved meanwhile: a LeaderAndIsr follows
        return tuple(answer.isr), answer.partition_epoch

    async def _stored(self, topic: str, partition: int, leader_epoch: int) -> tuple[tuple[int, ...], int] | None:
        """The ISR and version in the state znode, when it is still this leader's at ``leader_epoch``; None when it
        cannot be read or leadership moved (a LeaderAndIsr follows)."""
        path = zp.partition_state_path(topic, partition)
        try:
            await self._zk.sync(path)  # the controller's write is on the quorum; our server may lag behind it
            node = await self._zk.get(path)
        except (KazooException, OSError, RuntimeError) as exc:
            log.info("ISR change of %s-%d refused for a stale version; reading its state failed: %r", topic,
                     partition, exc)
            return None
        if node is None:
            return None
        state = zp.decode_partition_state(node[0], node[1].version)
        if state.leader != self._broker_id or state.leader_epoch != leader_epoch:
            return None
        log.info("ISR change of %s-%d refused for a stale version: the stored ISR is %s at version %d", topic,
                 partition, list(state.isr), state.zk_version)
        return state.isr, state.zk_version
