"""The controller's one ZooKeeper writer (Kafka's KafkaZkClient with `checkControllerAndEpoch`): every
write is a ZooKeeper multi that first checks /controller_epoch at the version this controller's
election wrote, so a controller that another one replaced can no longer change anything.

Election itself is the one write without that check: it creates the ephemeral /controller and bumps
/controller_epoch (conditional on the version read) in one transaction, so two contenders can never
both win the same epoch.

When a write fails its epoch check, another controller was elected: the writer stops writing (every
later write raises NotControllerError without reaching ZooKeeper) and calls `on_fenced` so the
controller resigns (Kafka's ControllerMovedException). A version conflict on a partition state (a
leader changed the ISR meanwhile) raises StateConflict with the state now stored instead.

The /controller timestamp is read from the broker's clock (common/clock.py), as Kafka's KafkaZkClient reads its
`Time`; the ZooKeeper session's own timeouts and retries are kazoo's, on kazoo's timers (zk/client.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Awaitable, Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.common.topic import TopicPartition
from pybroker.zk import paths as zp
from pybroker.controller.errors import NotControllerError
from pybroker.zk.client import ZkClient

log = logging.getLogger("pybroker.controller")

DELETE_BATCH = 500  # deletes per multi: a whole topic's znodes may not fit one ZooKeeper request
ATTEMPTS = 3


class StateConflict(BadVersionError):
    """The partition state's version moved (a leader's ISR change): `current` is what is stored now."""

    def __init__(self, current: zp.LeaderAndIsr | None):
        super().__init__()
        self.current = current


class FencedZkWriter:
    def __init__(self, zk: ZkClient, broker_id: int, on_fenced: Callable[[], Awaitable[None]],
                 clock: Clock = SYSTEM_CLOCK):
        self._zk = zk
        self._clock = clock
        self._broker_id = broker_id
        self._on_fenced = on_fenced
        self.epoch = 0
        self._epoch_version: int | None = None  # None: not the controller, writes are refused

    @property
    def active(self) -> bool:
        return self._epoch_version is not None

    async def elect(self) -> bool:
        """Stand for controller: True when this broker won, with `epoch` the new controller epoch."""
        epoch_node = await self._zk.get(zp.CONTROLLER_EPOCH)
        if epoch_node is None:
            with contextlib.suppress(NodeExistsError):
                await self._zk.create(zp.CONTROLLER_EPOCH, zp.encode_controller_epoch(0))
            epoch_node = await self._zk.get(zp.CONTROLLER_EPOCH)
            assert epoch_node is not None
        epoch, version = zp.decode_controller_epoch(epoch_node[0]), epoch_node[1].version
        transaction = self._zk.transaction()
        transaction.create(zp.CONTROLLER, zp.encode_controller(self._broker_id, self._clock.wall_ms()),
                           ephemeral=True)
        transaction.set_data(zp.CONTROLLER_EPOCH, zp.encode_controller_epoch(epoch + 1), version)
        try:
            await self._zk.commit(transaction)
        except (NodeExistsError, BadVersionError):
            return False
        self.epoch, self._epoch_version = epoch + 1, version + 1
        return True

    def resign(self) -> None:
        """Stop writing: every later write raises NotControllerError until the next election won."""
        self._epoch_version = None

    async def _commit(self, build: Callable[[Any], object]) -> None:
        """One fenced multi: the /controller_epoch check, then what `build` adds to the transaction."""
        if self._epoch_version is None:
            raise NotControllerError(f"Broker {self._broker_id} is not the controller")
        transaction = self._zk.transaction()
        transaction.check(zp.CONTROLLER_EPOCH, self._epoch_version)
        build(transaction)
        try:
            await self._zk.commit(transaction)
        except BadVersionError:
            await self._raise_if_fenced()
            raise

    async def _raise_if_fenced(self) -> None:
        """After a failed conditional write: when /controller_epoch moved, another controller was elected
        and this one must stop, never retry as if a leader had raced."""
        node = await self._zk.get(zp.CONTROLLER_EPOCH)
        if node is not None and node[1].version == self._epoch_version:
            return
        log.warning("[Controller id=%d] controller epoch %d was fenced by a newer controller; resigning",
                    self._broker_id, self.epoch)
        self.resign()
        await self._on_fenced()
        raise NotControllerError(f"Broker {self._broker_id} is no longer the controller")

    # Partition states (/brokers/topics/T/partitions/P/state)

    async def create_partition_state(self, key: TopicPartition, state: zp.LeaderAndIsr) -> zp.LeaderAndIsr | None:
        """A new partition's first state; when another writer got there first, what it wrote (None when
        its partition znode exists without a state)."""
        with contextlib.suppress(NodeExistsError):
            await self._commit(lambda t: t.create(zp.partitions_path(key[0])))

        def build(transaction: Any) -> None:
            transaction.create(zp.partition_path(*key))
            transaction.create(zp.partition_state_path(*key), zp.encode_partition_state(state))

        try:
            await self._commit(build)
        except NodeExistsError:
            return await self.read_partition_state(key)
        return dataclasses.replace(state, zk_version=0)

    async def set_partition_state(self, key: TopicPartition, state: zp.LeaderAndIsr) -> zp.LeaderAndIsr:
        """Conditional on both the controller epoch and `state.zk_version` (the version it replaces);
        the state as stored (its new version), or StateConflict."""
        try:
            await self._commit(lambda t: t.set_data(
                zp.partition_state_path(*key), zp.encode_partition_state(state), state.zk_version))
        except BadVersionError:
            raise StateConflict(await self.read_partition_state(key)) from None
        return dataclasses.replace(state, zk_version=state.zk_version + 1)

    async def read_partition_state(self, key: TopicPartition) -> zp.LeaderAndIsr | None:
        stored = await self.read_partition_state_written(key)
        return None if stored is None else stored[0]

    async def read_partition_state_written(self, key: TopicPartition) -> tuple[zp.LeaderAndIsr, int] | None:
        """The state and the zxid of its last write (the znode's mzxid), comparable with a broker
        epoch (the czxid of a registration): which brokers registered after the state was written."""
        node = await self._zk.get(zp.partition_state_path(*key))
        return None if node is None else (zp.decode_partition_state(node[0], node[1].version), node[1].mzxid)

    # Topics and admin znodes

    async def set_topic(self, topic: str, data: bytes) -> None:
        """/brokers/topics/T: the assignment with the ongoing moves' adding and removing replicas."""
        await self._commit(lambda t: t.set_data(zp.topic_path(topic), data))

    async def delete(self, *paths: str) -> None:
        """Delete each of `paths` with everything under it (missing ones are fine), children first."""
        for attempt in range(ATTEMPTS):
            doomed = [node for path in paths for node in await self._subtree(path)]
            try:
                for start in range(0, len(doomed), DELETE_BATCH):
                    await self._commit(_deleting(doomed[start:start + DELETE_BATCH]))
                return
            except (NoNodeError, NotEmptyError):  # the tree changed while we listed it: list again
                if attempt == ATTEMPTS - 1:
                    raise

    async def _subtree(self, path: str) -> list[str]:
        """`path` and its descendants, deepest first; [] when it does not exist."""
        if await self._zk.get(path) is None:
            return []
        below = []
        for child in await self._zk.children(path):
            below.extend(await self._subtree(f"{path}/{child}"))
        return below + [path]


def _deleting(paths: list[str]) -> Callable[[Any], None]:
    def build(transaction: Any) -> None:
        for path in paths:
            transaction.delete(path)
    return build
