"""Membership of a consumer-protocol group (KIP-848, ``group.protocol=consumer``) with ConsumerGroupHeartbeat.

The broker computes the assignment; this member only reports what it subscribes to and what it owns,
and moves towards the assignment each heartbeat response brings: partitions it must give up are revoked
first (the owner's ``on_revoked`` stops fetching and commits them), then new ones are taken
(``on_assigned``), and the next heartbeat, sent at once, acknowledges the new set of owned partitions.
As with :class:`~pybroker.client.membership.GroupMember` the owner drives it from its own loop: it calls
:meth:`poll` often, which heartbeats when the interval the broker asked for has passed or an
acknowledgement is due. Kafka's ``ConsumerMembershipManager`` is the reference for the rules here.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping, Sequence

from pybroker.client.cluster import BrokerNode
from pybroker.client.connection import Connection
from pybroker.client.errors import ResponseError, check
from pybroker.client.groups import COORDINATOR_MOVED, CoordinatorMoved, GroupAdmin
from pybroker.common.topic import TopicPartition, topic_id_to_string
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
FIRST_CLIENT_MEMBER_ID_VERSION = 1
"""From ConsumerGroupHeartbeat v1 the client makes up its member id; before, the first response brings it."""
REJOIN = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
LOST_COMMIT_ERRORS = frozenset({ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID,
                                ErrorCode.FENCED_MEMBER_EPOCH})
RETRY_BACKOFF_S = 0.1
MAX_JOIN_ATTEMPTS = 20

Listener = Callable[[list[TopicPartition]], Awaitable[None]]


async def _ignore(_: list[TopicPartition]) -> None:
    return None


@dataclass(frozen=True, slots=True)
class ConsumerMemberSettings:
    rebalance_timeout_ms: int = 300000  # max.poll.interval.ms default, as Kafka's consumer sends it
    instance_id: str | None = None
    """group.instance.id: a static member, which leaves with epoch -2 so that it can come back."""
    server_assignor: str | None = None
    """group.remote.assignor; None lets the broker choose."""


@dataclass(frozen=True, slots=True)
class Listeners:
    """What the owner does when partitions move (Kafka's ConsumerRebalanceListener)."""

    on_revoked: Listener = _ignore
    """Stop fetching and commit these; the broker gives them to another member only afterwards."""
    on_assigned: Listener = _ignore
    on_lost: Listener = _ignore
    """Fenced: these already belong to someone else, so they are dropped without a commit."""


def new_member_id() -> str:
    """A random UUID in Kafka's text form (URL-safe base64), as Kafka's consumer makes its member id."""
    return topic_id_to_string(uuid.uuid4())


class ConsumerGroupMember:
    """This process as one consumer-protocol member of ``group_id`` subscribed to ``topics``."""

    def __init__(self, groups: GroupAdmin, group_id: str, topics: Sequence[str],
                 settings: ConsumerMemberSettings = ConsumerMemberSettings(),
                 listeners: Listeners = Listeners()) -> None:
        self.groups = groups
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.settings = settings
        self.listeners = listeners
        self.member_id = ""
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = 0
        self.owned: set[TopicPartition] = set()
        self._next_heartbeat = 0.0
        self._topic_ids: dict[str, uuid.UUID] = {}

    @property
    def generation_id(self) -> int:
        """What OffsetCommit carries: the member epoch."""
        return self.member_epoch

    async def join(self) -> list[TopicPartition]:
        """Heartbeat with epoch 0 until the group takes us in; the partitions owned by then."""
        for _ in range(MAX_JOIN_ATTEMPTS):
            await asyncio.sleep(max(0.0, self._next_heartbeat - time.monotonic()))  # a retry's backoff
            await self.heartbeat()
            if self.member_epoch > JOIN_EPOCH:
                return sorted(self.owned)
        raise ResponseError(ErrorCode.UNKNOWN_MEMBER_ID,
                            f"Could not join group {self.group_id} after {MAX_JOIN_ATTEMPTS} attempts")

    async def poll(self) -> None:
        """Heartbeat if one is due."""
        if time.monotonic() >= self._next_heartbeat:
            await self.heartbeat()

    async def heartbeat(self) -> None:
        """One heartbeat, and the reconciliation its assignment asks for."""
        response = await self._send(self._request)
        code = ErrorCode.from_code(response.error_code)
        if code in REJOIN:  # fenced: give up everything, rejoin at once under the same member id
            await self._lose()
            return
        if code.retriable:
            self._next_heartbeat = time.monotonic() + RETRY_BACKOFF_S
            return
        check(code, response.error_message)
        if response.member_id:
            self.member_id = response.member_id
        self.member_epoch = response.member_epoch
        self.heartbeat_interval_ms = response.heartbeat_interval_ms
        self._next_heartbeat = time.monotonic() + response.heartbeat_interval_ms / 1000
        if response.assignment is not None:
            await self._reconcile(await self._named(response.assignment.topic_partitions))

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit under the member epoch; a commit the group no longer accepts from us (fenced or stale
        epoch) is dropped, as those partitions are being taken away anyway."""
        if not offsets or not self.member_id or self.member_epoch <= JOIN_EPOCH:
            return
        try:
            await self.groups.commit_offsets(self.group_id, offsets, generation_id=self.member_epoch,
                                             member_id=self.member_id)
        except ResponseError as exc:
            if exc.code not in LOST_COMMIT_ERRORS:
                raise

    async def leave(self) -> None:
        """Leave with epoch -1, or -2 for a static member that will return."""
        if not self.member_id or self.member_epoch <= JOIN_EPOCH:
            return
        epoch = LEAVE_EPOCH if self.settings.instance_id is None else STATIC_LEAVE_EPOCH

        def request(_: int) -> ConsumerGroupHeartbeatRequest:
            return ConsumerGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                                 member_epoch=epoch, instance_id=self.settings.instance_id)

        response = await self._send(request)
        if response.error_code not in REJOIN:
            check(response.error_code, response.error_message)
        self.member_epoch = JOIN_EPOCH
        self.owned = set()

    def _request(self, version: int) -> ConsumerGroupHeartbeatRequest:
        """A full heartbeat: subscription and owned partitions every time (Kafka sends only what changed)."""
        if not self.member_id and version >= FIRST_CLIENT_MEMBER_ID_VERSION:
            self.member_id = new_member_id()
        owned: dict[uuid.UUID, list[int]] = {}
        for tp in sorted(self.owned):
            topic_id = self._topic_ids.get(tp.topic)
            if topic_id is not None:
                owned.setdefault(topic_id, []).append(tp.partition)
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
            instance_id=self.settings.instance_id, rebalance_timeout_ms=self.settings.rebalance_timeout_ms,
            subscribed_topic_names=list(self.topics), server_assignor=self.settings.server_assignor,
            topic_partitions=[ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=p)
                              for t, p in owned.items()])

    async def _send(self, build: Callable[[int], ConsumerGroupHeartbeatRequest]) -> ConsumerGroupHeartbeatResponse:
        async def send(_: BrokerNode, connection: Connection) -> ConsumerGroupHeartbeatResponse:
            version = connection.versions.version_for(ConsumerGroupHeartbeatRequest.API_KEY)
            response = await connection.send_at(build(version), version, ConsumerGroupHeartbeatResponse)
            if response.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(response.error_code)
            return response

        return await self.groups.on_coordinator(self.group_id, send)

    async def _named(self, assigned: Sequence[ConsumerGroupHeartbeatResponse.TopicPartitions]
                     ) -> set[TopicPartition]:
        """The assignment by topic name; a topic id our metadata does not know yet is looked up once."""
        if any(t.topic_id not in self._topic_ids.values() for t in assigned):
            response = await self.groups.client.metadata(self.topics)
            self._topic_ids = {t.name: t.topic_id for t in response.topics
                               if t.name and t.error_code == ErrorCode.NONE}
        names = {topic_id: name for name, topic_id in self._topic_ids.items()}
        return {TopicPartition(names[t.topic_id], p) for t in assigned if t.topic_id in names for p in t.partitions}

    async def _reconcile(self, target: set[TopicPartition]) -> None:
        """Revoke what is no longer ours, then take what is new; acknowledge with the next heartbeat."""
        revoked, added = self.owned - target, target - self.owned
        if revoked:
            await self.listeners.on_revoked(sorted(revoked))
            self.owned -= revoked
        if added:
            await self.listeners.on_assigned(sorted(added))
            self.owned |= added
        if revoked or added:
            self._next_heartbeat = 0.0

    async def _lose(self) -> None:
        lost, self.owned = sorted(self.owned), set()
        if lost:
            await self.listeners.on_lost(lost)
        self.member_epoch = JOIN_EPOCH
        self._next_heartbeat = 0.0
