"""The controller's safety rules against a real ZooKeeper, without broker processes: the brokers are
registrations made by test-owned ZooKeeper sessions (so a bounce is one atomic delete-and-create), and
the assertions read what the controller wrote to ZooKeeper. Requests the controller sends to these
brokers go to a closed port and are retried until the controller stops. The last test checks the
controller's channel against one real (single-node) broker.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Iterator, Mapping

import pytest
from kazoo.client import KazooClient, KazooState

from pybroker.zk import paths as zp
from pybroker.controller.channel import ControllerChannel
from pybroker.common.topic import TopicPartition
from pybroker.controller.controller import RebalanceConfig, ZkController
from pybroker.controller.election import LogEnd
from pybroker.zk.client import SESSION_LOST, ZkClient, ZkEvent
from pybroker.protocol.messages import LeaderAndIsrResponse, UpdateMetadataRequest, UpdateMetadataResponse
from tests.eventually import eventually_async
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess

CLOSED_PORT = 1
SESSION_MS = 4000
_chroots = itertools.count()


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()




class Harness:
    """One test's chroot: broker registrations (one session each), topics, and a controller (broker 0)."""

    def __init__(self, zookeeper: ZooKeeperServer):
        self.connect = f"{zookeeper.connect}/safety{next(_chroots)}"
        self.admin = KazooClient(self.connect)
        self.sessions: dict[int, KazooClient] = {}
        self.zk: ZkClient | None = None
        self.controller: ZkController | None = None
        self._events: asyncio.Task[None] | None = None
        self.log_ends: dict[int, LogEnd] = {}
        """What each broker answers for its replicas' (latest leader epoch, log end offset) when the
        controller compares logs; a broker left out does not answer."""
        self.log_end_questions: list[dict[TopicPartition, tuple[int, ...]]] = []

    async def _answer_log_ends(self, wanted: Mapping[TopicPartition, tuple[int, ...]]
                               ) -> dict[TopicPartition, dict[int, LogEnd]]:
        self.log_end_questions.append(dict(wanted))
        return {key: {b: self.log_ends[b] for b in brokers if b in self.log_ends} for key, brokers in wanted.items()}

    async def __aenter__(self) -> "Harness":
        self.zk = ZkClient(self.connect, session_timeout_ms=SESSION_MS, connection_timeout_ms=SESSION_MS)
        await self.zk.start()
        await self.zk.ensure_paths(*zp.PERSISTENT_PATHS)
        await asyncio.to_thread(self.admin.start, 10)
        self._events = asyncio.get_running_loop().create_task(self.zk.run_events())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.controller is not None:
            await self.controller.stop()
        if self._events is not None:
            self._events.cancel()
        assert self.zk is not None
        await self.zk.stop()
        for client in [self.admin, *self.sessions.values()]:
            await asyncio.to_thread(client.stop)
            client.close()

    async def register(self, broker_id: int) -> int:
        """Register `broker_id` under a session of its own; its broker epoch (the znode's czxid)."""
        session = KazooClient(self.connect)
        await asyncio.to_thread(session.start, 10)
        self.sessions[broker_id] = session
        path = zp.broker_path(broker_id)
        await asyncio.to_thread(session.create, path, zp.encode_broker("127.0.0.1", CLOSED_PORT, None, 0),
                                ephemeral=True)
        return (await asyncio.to_thread(session.get, path))[1].czxid

    async def bounce(self, broker_id: int) -> None:
        """The broker's registration goes and comes back in one step, as the controller sees a broker
        that restarted between two reads of /brokers/ids (KIP-380)."""
        session = self.sessions[broker_id]
        path = zp.broker_path(broker_id)
        transaction = session.transaction()
        transaction.delete(path)
        transaction.create(path, zp.encode_broker("127.0.0.1", CLOSED_PORT, None, 1), ephemeral=True)
        await asyncio.to_thread(transaction.commit)

    async def register_again(self, broker_id: int, started_epoch: int) -> None:
        """The same broker process registering again after its session expired, in one step: a new broker
        epoch, carrying the epoch of the process's first registration (its log lived on)."""
        session = self.sessions[broker_id]
        path = zp.broker_path(broker_id)
        transaction = session.transaction()
        transaction.delete(path)
        transaction.create(path, zp.encode_broker("127.0.0.1", CLOSED_PORT, None, 1, started_epoch=started_epoch),
                           ephemeral=True)
        await asyncio.to_thread(transaction.commit)

    async def kill(self, broker_id: int) -> None:
        session = self.sessions.pop(broker_id)
        await asyncio.to_thread(session.stop)
        session.close()

    async def create_topic(self, topic: str, replicas: tuple[int, ...], **configs: str) -> None:
        if configs:
            await asyncio.to_thread(self.admin.create, zp.topic_config_path(topic),
                                    zp.encode_topic_config(configs), makepath=True)
        await asyncio.to_thread(self.admin.create, zp.topic_path(topic), zp.encode_topic({0: replicas}, ""),
                                makepath=True)

    async def start_controller(self, *, unclean_election: bool = False) -> ZkController:
        assert self.zk is not None
        self.controller = ZkController(self.zk, 0, socket_timeout_ms=1000, unclean_election=unclean_election,
                                       rebalance=RebalanceConfig(enabled=False), log_ends=self._answer_log_ends)
        await self.controller.start()
        assert self.controller.active
        return self.controller

    async def state(self, topic: str) -> zp.LeaderAndIsr:
        data, stat = await asyncio.to_thread(self.admin.get, zp.partition_state_path(topic, 0))
        return zp.decode_partition_state(data, stat.version)


def test_a_bounced_leader_loses_leadership_and_the_epoch_moves_on(zookeeper: ZooKeeperServer) -> None:
    """KIP-380: a broker whose registration changed restarted, and may have lost an unflushed tail.
    Kafka's processBrokerChange treats it as failed, then started: leadership moves to another ISR
    member at a new leader epoch, so followers never truncate to the restarted broker's log."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            for broker_id in (1, 2, 3):
                await harness.register(broker_id)
            await harness.create_topic("bounce", (1, 2, 3))
            await harness.start_controller()
            before = await harness.state("bounce")
            assert (before.leader, before.isr) == (1, (1, 2, 3))
            await harness.bounce(1)

            async def moved() -> zp.LeaderAndIsr | None:
                state = await harness.state("bounce")
                return state if state.leader in (2, 3) else None

            after = await eventually_async(moved, "the leadership of bounce-0 to leave the bounced broker 1")
            assert after.leader_epoch > before.leader_epoch
            assert 1 not in after.isr  # it rejoins by catching up with the new leader

    asyncio.run(scenario())


def test_a_bounced_sole_replica_leads_again_at_a_new_epoch(zookeeper: ZooKeeperServer) -> None:
    """With no other replica the bounced broker is elected again, but at a new leader epoch."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            await harness.register(1)
            await harness.create_topic("single", (1,))
            await harness.start_controller()
            before = await harness.state("single")
            await harness.bounce(1)

            async def bumped() -> bool:
                state = await harness.state("single")
                return state.leader == 1 and state.leader_epoch > before.leader_epoch

            await eventually_async(bumped, "a new leader epoch for single-0 on broker 1")

    asyncio.run(scenario())


async def write_state(harness: Harness, topic: str, state: zp.LeaderAndIsr) -> None:
    """A partition state as an earlier controller left it."""
    await asyncio.to_thread(harness.admin.create, zp.partition_state_path(topic, 0),
                            zp.encode_partition_state(state), makepath=True)


def test_a_leader_restarted_before_a_controller_failover_loses_leadership(zookeeper: ZooKeeperServer) -> None:
    """Chaos seed 6: the leader (also the controller) lost power and its log, re-registered, and only then
    was a new controller elected, which never saw the old registration. The registration is newer than
    the partition state's last write, so the new controller handles the leader as bounced: leadership
    to the other ISR member at a new leader epoch (not the restarted broker at the same epoch, which
    made the follower truncate acknowledged records to the leader's empty log)."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            for broker_id in (1, 2):
                await harness.register(broker_id)
            await harness.create_topic("failover", (2, 1))
            await write_state(harness, "failover", zp.LeaderAndIsr(2, 5, (2, 1), 1))
            await harness.bounce(2)
            await harness.start_controller()
            after = await harness.state("failover")
            assert (after.leader, after.isr) == (1, (1,))
            assert after.leader_epoch > 5

    asyncio.run(scenario())


def test_brokers_that_only_registered_again_are_not_counted_as_restarted_at_a_controller_failover(
        zookeeper: ZooKeeperServer) -> None:
    """Chaos round 6009: ZooKeeper restarted and every session expired. Brokers 1 and 2 registered again
    (same processes, logs intact) while the leader, 3, was down after losing power; then a new controller
    was elected. It counted 1 and 2 as restarted, left the ISR to 3 alone and the partition waiting for
    it; 3 came back with a log the power loss had cut, was elected, and 1 and 2 truncated every
    acknowledged record to it. A re-registration carries its process's first broker epoch, which is older
    than the state: 1 or 2 must lead."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            epochs = {broker_id: await harness.register(broker_id) for broker_id in (1, 2, 3)}
            await harness.create_topic("kept", (3, 1, 2))
            await write_state(harness, "kept", zp.LeaderAndIsr(3, 5, (3, 1, 2), 1))
            await harness.kill(3)
            for broker_id in (1, 2):
                await harness.register_again(broker_id, epochs[broker_id])
            await harness.start_controller()
            after = await harness.state("kept")
            assert after.leader in (1, 2), after
            assert {1, 2} <= set(after.isr) and after.leader_epoch > 5

    asyncio.run(scenario())


def test_a_leader_that_only_registered_again_keeps_leading(zookeeper: ZooKeeperServer) -> None:
    """A running controller sees the leader's broker epoch change, but by the same process (its session
    expired, its log did not go anywhere): it is not a bounce, so leadership stays. A real restart of a
    follower, seen after it, is handled as one (out of the ISR), which shows the controller has taken in
    both changes when the test looks."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            epochs = {broker_id: await harness.register(broker_id) for broker_id in (1, 2, 3)}
            await harness.create_topic("stay", (1, 2, 3))
            await harness.start_controller()
            before = await harness.state("stay")
            assert (before.leader, before.isr) == (1, (1, 2, 3))
            await harness.register_again(1, epochs[1])
            await harness.bounce(2)

            async def follower_out() -> zp.LeaderAndIsr | None:
                state = await harness.state("stay")
                return state if 2 not in state.isr else None

            after = await eventually_async(follower_out, "the restarted follower 2 to leave the ISR of stay-0")
            assert after.leader == 1 and 1 in after.isr, after

    asyncio.run(scenario())


def test_a_controller_failover_leaves_partitions_written_after_the_registrations_alone(
        zookeeper: ZooKeeperServer) -> None:
    """No false bounce: a state written after every registration (here an ISR a leader wrote after its
    followers caught up) is adopted as it is."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            for broker_id in (1, 2):
                await harness.register(broker_id)
            await harness.create_topic("steady", (2, 1))
            await write_state(harness, "steady", zp.LeaderAndIsr(2, 5, (2, 1), 1))
            await harness.start_controller()
            after = await harness.state("steady")
            assert (after.leader, after.leader_epoch, after.isr, after.zk_version) == (2, 5, (2, 1), 0)

    asyncio.run(scenario())


def test_a_full_cluster_restart_comes_up_at_a_new_leader_epoch(zookeeper: ZooKeeperServer) -> None:
    """Every broker registered after every state was written (the whole cluster restarted): no ISR member
    is left that did not restart, so the controller compares the members' logs; level logs keep the
    whole ISR and the first replica leads again, at a new leader epoch; no partition stays offline."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            await harness.create_topic("restart", (2, 1))
            await harness.create_topic("single", (1,))
            await write_state(harness, "restart", zp.LeaderAndIsr(2, 5, (2, 1), 1))
            await write_state(harness, "single", zp.LeaderAndIsr(1, 3, (1,), 1))
            for broker_id in (1, 2):
                await harness.register(broker_id)
            harness.log_ends = {1: (5, 300), 2: (5, 300)}  # the same logs: both stay in sync
            await harness.start_controller()
            restart, single = await harness.state("restart"), await harness.state("single")
            assert harness.log_end_questions == [{("restart", 0): (2, 1)}]  # a sole member is not asked
            assert (restart.leader, restart.isr) == (2, (2, 1)) and restart.leader_epoch > 5
            assert (single.leader, single.isr) == (1, (1,)) and single.leader_epoch > 3

    asyncio.run(scenario())


def test_topic_unclean_leader_election_override_wins_over_the_broker_default(zookeeper: ZooKeeperServer) -> None:
    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            for broker_id in (1, 2):
                await harness.register(broker_id)
            await harness.create_topic("dirty", (1, 2), **{"unclean.leader.election.enable": "true"})
            await harness.create_topic("clean", (1, 2))
            for topic in ("dirty", "clean"):  # broker 2 fell out of sync before broker 1 died
                await asyncio.to_thread(harness.admin.create, zp.partition_state_path(topic, 0),
                                        zp.encode_partition_state(zp.LeaderAndIsr(1, 3, (1,), 1)), makepath=True)
            await harness.start_controller(unclean_election=False)
            await harness.kill(1)

            async def dirty_elected() -> bool:
                return (await harness.state("dirty")).leader == 2

            await eventually_async(dirty_elected, "an unclean election of broker 2 for dirty-0")
            dirty = await harness.state("dirty")
            assert dirty.isr == (2,)
            clean = await harness.state("clean")
            assert clean.leader == zp.NO_LEADER and clean.isr == (1,)

    asyncio.run(scenario())


def test_a_controller_whose_epoch_check_fails_resigns(zookeeper: ZooKeeperServer) -> None:
    """Another controller bumped /controller_epoch: the next fenced write fails its epoch check and the
    old controller must stop acting as one (Kafka's ControllerMovedException), not retry as an ISR race."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            for broker_id in (1, 2):
                await harness.register(broker_id)
            await harness.create_topic("fenced", (1, 2))
            controller = await harness.start_controller()
            data, stat = await asyncio.to_thread(harness.admin.get, zp.CONTROLLER_EPOCH)
            await asyncio.to_thread(harness.admin.set, zp.CONTROLLER_EPOCH,
                                    zp.encode_controller_epoch(zp.decode_controller_epoch(data) + 1), stat.version)
            before = await harness.state("fenced")
            await harness.kill(1)

            async def resigned() -> bool:
                return not controller.active

            await eventually_async(resigned, "the fenced controller to resign")
            assert await harness.state("fenced") == before

    asyncio.run(scenario())


def test_a_controller_request_failing_unexpectedly_does_not_stop_later_ones(
        broker: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    """The channel's sender to a broker survives an error outside its retry cases (here the answer is not
    of the expected type): it logs it and delivers the requests after it. The broker is single-node: it
    answers UpdateMetadata STALE_CONTROLLER_EPOCH."""
    request = UpdateMetadataRequest(controller_id=0, controller_epoch=1, broker_epoch=-1, live_brokers=[],
                                    topic_states=[])

    async def scenario() -> None:
        assert broker.port is not None
        channel = ControllerChannel(5000)
        channel.add_broker(0, "127.0.0.1", broker.port)
        channel.send(0, request, 7, LeaderAndIsrResponse)  # wrong response type: a TypeError
        channel.send(0, request, 7, UpdateMetadataResponse)

        async def delivered() -> bool:
            return "answered UpdateMetadataRequest with error" in caplog.text

        try:
            await eventually_async(delivered, "the second request's answer")
        finally:
            await channel.close()
        assert "Controller request UpdateMetadataRequest to broker 0 failed; skipping it" in caplog.text

    with caplog.at_level(logging.INFO, logger="pybroker.controller"):
        asyncio.run(scenario())


def test_restarted_members_never_lead_while_an_isr_member_that_did_not_restart_may_return(
        zookeeper: ZooKeeperServer) -> None:
    """Chaos round 2003: the leader (2) lost power and its log, the controller (0) was killed, a follower
    (1) had re-registered after a pause; the new controller found 1 and 2 registered after the state
    was written and 0 not registered. It must not elect 2 (it did, with ISR [2, 1], and every replica
    truncated partition txn-0 to 2's empty log): it waits for 0 and elects the longest log."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            for broker_id in (1, 2):
                await harness.register(broker_id)
            await harness.create_topic("power", (2, 0, 1))
            await write_state(harness, "power", zp.LeaderAndIsr(2, 1, (2, 0, 1), 1))
            await harness.bounce(1)
            await harness.bounce(2)
            harness.log_ends = {0: (1, 500), 1: (1, 480), 2: (-1, 0)}
            await harness.start_controller()
            after = await harness.state("power")
            assert (after.leader, after.isr, after.elect_longest_log) == (zp.NO_LEADER, (2, 0, 1), True)
            assert harness.log_end_questions == []  # not while 0 is away
            await harness.register(0)

            async def led_by_0() -> zp.LeaderAndIsr | None:
                state = await harness.state("power")
                return state if state.leader == 0 else None

            back = await eventually_async(led_by_0, "broker 0 to lead power-0 once it registered")
            assert back.isr == (0,) and back.leader_epoch > after.leader_epoch and not back.elect_longest_log

    asyncio.run(scenario())


def test_a_leader_that_bounces_as_its_follower_dies_waits_for_the_follower(zookeeper: ZooKeeperServer) -> None:
    """The live path of the same rule: ISR [1, 2] led by 1; in one change of /brokers/ids, 2 is gone and
    1 re-registered (it restarted and may have lost an unflushed tail). The bounced broker does not
    lead again at once: when 2 returns, the longer log, 2's, leads."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            for broker_id in (1, 2):
                await harness.register(broker_id)
            await harness.create_topic("waits", (1, 2))
            await harness.start_controller()
            before = await harness.state("waits")
            assert (before.leader, before.isr) == (1, (1, 2))
            session = harness.sessions[1]
            transaction = session.transaction()  # one atomic change: 2 gone, 1 bounced
            transaction.delete(zp.broker_path(2))
            transaction.delete(zp.broker_path(1))
            transaction.create(zp.broker_path(1), zp.encode_broker("127.0.0.1", CLOSED_PORT, None, 1), ephemeral=True)
            await asyncio.to_thread(transaction.commit)

            async def leaderless() -> zp.LeaderAndIsr | None:
                state = await harness.state("waits")
                return state if state.leader == zp.NO_LEADER else None

            after = await eventually_async(leaderless, "the bounced broker 1 to lose the leadership of waits-0")
            assert after.isr == (1, 2) and after.elect_longest_log
            harness.log_ends = {1: (3, 60), 2: (3, 100)}  # 1 lost the tail 2 has
            await harness.kill(2)
            await harness.register(2)

            async def led_by_2() -> zp.LeaderAndIsr | None:
                state = await harness.state("waits")
                return state if state.leader == 2 else None

            await eventually_async(led_by_2, "broker 2 to lead waits-0 once it registered again")

    asyncio.run(scenario())


def test_a_session_loss_handled_after_the_next_election_leaves_the_new_controller_alone(
        zookeeper: ZooKeeperServer) -> None:
    """Chaos round 7014: the controller's session expired, a new session came up and the broker was
    elected again before the event of the loss was handled; handling it then resigned the new
    controllership, /controller stayed held by a broker that no longer acted, and every ISR change was
    refused NOT_CONTROLLER. A loss handled in time still resigns."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            assert harness.zk is not None
            controller = await harness.start_controller()
            harness.zk._on_state(KazooState.LOST)  # noticed now, handled by the event queue
            await eventually_async(lambda: _inactive(controller), "the controller to resign after its session loss")

            await asyncio.to_thread(harness.admin.delete, zp.CONTROLLER)  # its /controller goes; it stands again
            await eventually_async(lambda: _active(controller), "the broker to be elected again")
            epoch = controller.epoch
            harness.zk.post(ZkEvent(SESSION_LOST))  # the same loss, handled only now
            await asyncio.sleep(0)  # the post reaches the queue on the loop's next pass
            await harness.zk.events.call(_nothing)  # queued after it: returns once it was handled
            assert controller.active and controller.epoch == epoch

    asyncio.run(scenario())


async def _inactive(controller: ZkController) -> bool:
    return not controller.active


async def _active(controller: ZkController) -> bool:
    return controller.active


async def _nothing() -> None:
    return None


def test_a_member_that_restarted_intact_leads_over_one_that_was_away_and_lost_power(
        zookeeper: ZooKeeperServer) -> None:
    """Chaos round 7001: ISR [0, 2] led by 0. Broker 2 was killed and restarted (its log intact), then 0
    lost power, and a new controller found 2 registered after the state was written and 0 away. It kept
    0 as the one member that had not restarted and elected it when it came back with the log its power
    loss had cut; 2 truncated 4,106 acknowledged records to it. Neither registration tells a kill from a
    power loss: the controller waits for both and elects the longer log."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            await harness.register(2)
            await harness.create_topic("cut", (0, 2))
            await write_state(harness, "cut", zp.LeaderAndIsr(0, 4, (0, 2), 1))
            await harness.bounce(2)
            harness.log_ends = {0: (4, 100), 2: (4, 4206)}
            await harness.start_controller()
            waiting = await harness.state("cut")
            assert (waiting.leader, waiting.isr, waiting.elect_longest_log) == (zp.NO_LEADER, (0, 2), True)
            await harness.register(0)

            async def led() -> zp.LeaderAndIsr | None:
                state = await harness.state("cut")
                return state if state.leader != zp.NO_LEADER else None

            elected = await eventually_async(led, "a leader for cut-0 once broker 0 registered")
            assert (elected.leader, elected.isr) == (2, (2,)) and elected.leader_epoch > waiting.leader_epoch
            assert harness.log_end_questions == [{("cut", 0): (0, 2)}]

    asyncio.run(scenario())


def test_the_wait_for_every_member_outlives_the_controller_that_began_it(zookeeper: ZooKeeperServer) -> None:
    """A controller elected during the wait finds it in the partition state (Kafka's readers skip the
    extra key): broker 1 is live and registered before the state was written, so it counts as intact by
    its registration, yet it must not lead until 2 is back and their logs are compared."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            await harness.register(1)
            await harness.create_topic("outlives", (1, 2))
            await write_state(harness, "outlives", zp.LeaderAndIsr(zp.NO_LEADER, 7, (1, 2), 1,
                                                                   elect_longest_log=True))
            harness.log_ends = {1: (6, 10), 2: (7, 3)}  # 2 has a later leader epoch: it is ahead
            await harness.start_controller()
            assert (await harness.state("outlives")).leader == zp.NO_LEADER
            await harness.register(2)

            async def led() -> zp.LeaderAndIsr | None:
                state = await harness.state("outlives")
                return state if state.leader != zp.NO_LEADER else None

            elected = await eventually_async(led, "a leader for outlives-0 once broker 2 registered")
            assert (elected.leader, elected.isr, elected.elect_longest_log) == (2, (2,), False)

    asyncio.run(scenario())


def test_a_member_that_does_not_tell_its_log_end_keeps_the_partition_waiting(zookeeper: ZooKeeperServer) -> None:
    """Both ISR members went in one change; they are back, but 2 does not answer: no election (the first
    one back may be the one that lost its tail). The controller asks again until 2 answers."""

    async def scenario() -> None:
        async with Harness(zookeeper) as harness:
            for broker_id in (1, 2):
                await harness.register(broker_id)
            await harness.create_topic("mute", (1, 2))
            await harness.start_controller()
            transaction = harness.sessions[1].transaction()  # one atomic change: 1 and 2 gone
            transaction.delete(zp.broker_path(1))
            transaction.delete(zp.broker_path(2))
            await asyncio.to_thread(transaction.commit)

            async def waiting() -> zp.LeaderAndIsr | None:
                state = await harness.state("mute")
                return state if state.elect_longest_log else None

            await eventually_async(waiting, "mute-0 to wait for both members")
            for broker_id in (1, 2):
                await harness.kill(broker_id)
            harness.log_ends = {1: (0, 50)}
            for broker_id in (1, 2):
                await harness.register(broker_id)
            async def asked() -> bool:
                return bool(harness.log_end_questions)

            await eventually_async(asked, "the controller to ask for the log ends")
            assert (await harness.state("mute")).leader == zp.NO_LEADER
            harness.log_ends = {1: (0, 50), 2: (0, 80)}  # 2 answers from now on

            async def led() -> zp.LeaderAndIsr | None:
                state = await harness.state("mute")
                return state if state.leader != zp.NO_LEADER else None

            assert (await eventually_async(led, "mute-0 to be led once 2 answered")).leader == 2

    asyncio.run(scenario())
