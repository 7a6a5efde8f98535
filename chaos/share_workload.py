"""The share-group workload (`python -m chaos --share`): KIP-932 queues under the round's faults.

An idempotent acks=all producer writes to a topic of SHARE_PARTITIONS partitions read by MEMBERS share consumers of
one share group (more members than partitions), each a process of its own (share_member.py) accepting, releasing
and rejecting records at random and now and then sitting on its records past the lock; every few seconds one member
is SIGKILLed, holding its locks, and a new one joins. At the end the members accept everything until every record
the producer saw acknowledged is accounted for (or DRAIN_S pass), and share_checker.py judges the history.

Whether the brokers keep share-partition state durably is read from ApiVersions: a broker that serves
InitializeShareGroupState (key 83, the share coordinator's persister) does; without it a broker fault loses the
state, and the checker reports what that explains as such (see share_checker.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from chaos.checker import Report
from chaos.cluster import REPO, ChaosCluster
from chaos.history import History
from chaos.share_checker import check_share
from chaos.share_state_log import archived, passed
from chaos.workload import value_text
from pybroker.client import KafkaClient
from pybroker.protocol.api_keys import ApiKey

SHARE_TOPIC, SHARE_GROUP = "chaos-share", "chaos-share-group"
SHARE_PARTITIONS, MEMBERS = 2, 4
LOCK_MS, DELIVERY_LIMIT = 3000, 3
SHARE_BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": "1000",
                       "group.share.record.lock.duration.ms": str(LOCK_MS),
                       "group.share.delivery.count.limit": str(DELIVERY_LIMIT)}
"""A short lock, so that locks time out and killed members' records come back within a round."""
ACK_WEIGHTS = (0.7, 0.2, 0.1)  # accept, release, reject
HOLD_CHANCE = 0.03
PRODUCE_INTERVAL_S = 0.05
KILL_EVERY_S = (3.0, 8.0)
DRAIN_S = 60.0
LEADER_POLL_S = 0.5
SETUP_TIMEOUT_S = 60.0


class ShareWorkload:
    def __init__(self, cluster: ChaosCluster, history: History, seed: int) -> None:
        self.cluster, self.history = cluster, history
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.ended = threading.Event()
        """Set once the drain is over: the leader watch goes on through it."""
        self.members: dict[str, subprocess.Popen[str]] = {}
        self.members_lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.scratch = Path(tempfile.mkdtemp(prefix="chaos-share-"))
        self.accept_all = self.scratch / "accept-all"
        self.durable = False
        self._joined = 0
        self.watcher = threading.Thread(target=self._watch_leaders, name="share-leaders", daemon=True)

    def start(self) -> None:
        admin = self.cluster.admin()
        admin.create_topics([NewTopic(SHARE_TOPIC, SHARE_PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                            operation_timeout=30)[SHARE_TOPIC].result(SETUP_TIMEOUT_S)
        group = ConfigResource(ResourceType.GROUP, SHARE_GROUP, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([group])[group].result(SETUP_TIMEOUT_S)
        self.durable = asyncio.run(_serves_share_state(self.cluster.bootstrap))
        self.history.add("share-start", durable=self.durable, members=MEMBERS, partitions=SHARE_PARTITIONS,
                         delivery_count_limit=DELIVERY_LIMIT, lock_ms=LOCK_MS, wall=time.time())
        try:
            for _ in range(MEMBERS):
                self._join()
        except BaseException:
            self._stop_members()
            raise
        for target in (self._produce, self._kill):
            self.threads.append(threading.Thread(target=target, name=f"share-{target.__name__}", daemon=True))
            self.threads[-1].start()
        self.watcher.start()

    def finish(self) -> None:
        """Stop producing and killing, let the members accept everything until all is accounted for, stop them."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)
        self.accept_all.touch()
        deadline = time.monotonic() + DRAIN_S
        complete = False
        while time.monotonic() < deadline and not complete:
            time.sleep(1.0)
            complete = not check_share(self.history.snapshot(), DELIVERY_LIMIT, True).anomalies[
                "share_unacknowledged"]
        self._stop_members()
        self.ended.set()
        self.watcher.join(10)
        self.history.add("share-end", complete=complete)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _stop_members(self) -> None:
        """SIGTERM: a member closes its consumer (leaving the group) and exits; SIGKILL if it does not."""
        with self.members_lock:
            for process in self.members.values():
                process.send_signal(signal.SIGTERM)
            for process in self.members.values():
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def check(self, events: list[dict[str, Any]], report: Report) -> None:
        check_share(events, DELIVERY_LIMIT, self.durable, report)

    def record_broker_state(self, root: Path) -> None:
        """Add each share-partition leader's read of its state (from the stopped brokers' logs), and the records the
        share coordinator archived and those its start offset passed (from their ``__share_group_state``), to the
        history."""
        for event in [*state_reads(root, self.history.snapshot()), *archived(root, SHARE_GROUP),
                      *passed(root, SHARE_GROUP)]:
            self.history.add(event.pop("type"), **event)

    def _join(self) -> None:
        member = f"m{self._joined}"
        self._joined += 1
        params = {"bootstrap": self.cluster.bootstrap, "group": SHARE_GROUP, "topic": SHARE_TOPIC, "member": member,
                  "seed": self.rng.randrange(1 << 30), "weights": ACK_WEIGHTS, "hold_chance": HOLD_CHANCE,
                  "hold_s": LOCK_MS / 1000 + 1.0, "accept_all": str(self.accept_all)}
        process = subprocess.Popen([sys.executable, "-m", "chaos.share_member", json.dumps(params)], cwd=REPO,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.members[member] = process
        thread = threading.Thread(target=self._record, args=(process,), name=f"share-{member}", daemon=True)
        thread.start()

    def _record(self, process: subprocess.Popen[str]) -> None:
        """The member's events into the history, until it exits (or is killed)."""
        assert process.stdout is not None
        for line in process.stdout:
            event = json.loads(line)
            self.history.add(event.pop("type"), **event)

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                             "message.timeout.ms": 20000, "linger.ms": 5, "log_level": 3})

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                self.history.add("share-produced", partition=message.partition(), offset=message.offset(),
                                 value=value_text(message))
            else:
                self.history.add("share-produce-failed", value=value_text(message), error=str(error))

        sent = 0
        while not self.stopping.is_set():
            value = f"s{sent}"
            try:
                producer.produce(SHARE_TOPIC, value.encode(), on_delivery=delivered)
            except (KafkaException, BufferError) as exc:  # refused locally, e.g. the topic unknown after a restart
                self.history.add("share-produce-failed", value=value, error=str(exc))
            sent += 1
            producer.poll(PRODUCE_INTERVAL_S)
        producer.flush(30)

    def _watch_leaders(self) -> None:
        """Each change of a partition's leader, as Metadata shows it: with share state in memory, the new leader
        starts the share-partition again (the checker explains what that loses)."""
        admin = self.cluster.admin()
        leaders: dict[int, int] = {}
        while not self.ended.wait(LEADER_POLL_S):
            try:
                topic = admin.list_topics(SHARE_TOPIC, timeout=2).topics[SHARE_TOPIC]
            except (KafkaException, KeyError):
                continue
            for partition, found in topic.partitions.items():
                if partition in leaders and leaders[partition] != found.leader:
                    self.history.add("share-leader", partition=partition, leader=found.leader)
                leaders[partition] = found.leader

    def _kill(self) -> None:
        while not self.stopping.wait(self.rng.uniform(*KILL_EVERY_S)):
            with self.members_lock:
                member = self.rng.choice(sorted(self.members))
                process = self.members.pop(member)
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                self.history.add("share-member-killed", member=member)
                self._join()


async def _serves_share_state(bootstrap: str) -> bool:
    async with KafkaClient(bootstrap) as client:
        return ApiKey.INITIALIZE_SHARE_GROUP_STATE in (await client.connect()).versions.broker


STATE_READ = re.compile(r"^\[(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO Share-partition (?P<group>\S+) of "
                        r"(?P<topic>\S+)-(?P<partition>\d+) read at start offset \d+ \(state epoch \d+, "
                        r"leader epoch (?P<epoch>\d+)\)")


def state_reads(root: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each time a broker became the share-partition's leader and read its state (the broker logs that line before
    it serves the share-partition), as ``share-state-read`` events at ``at`` on the history's clock: a new leader's
    term, which the checker counts as a move. The broker's log and the history share the machine's wall clock; the
    share-start event gives the history's time at a wall time."""
    start = next((e for e in events if e["type"] == "share-start" and "wall" in e), None)
    if start is None:
        return []
    offset = start["wall"] - start["t"]
    reads = []
    for log in sorted(root.glob("broker-*/broker.log")):
        broker = int(log.parent.name.removeprefix("broker-"))
        for line in log.read_text(errors="replace").splitlines():
            found = STATE_READ.match(line)
            if found and found["group"] == SHARE_GROUP and found["topic"] == SHARE_TOPIC:
                wall = datetime.strptime(found["when"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                reads.append({"type": "share-state-read", "partition": int(found["partition"]), "broker": broker,
                              "leader_epoch": int(found["epoch"]), "at": round(wall - offset, 3)})
    return reads
