"""Who may send the requests only brokers send: LeaderAndIsr, UpdateMetadata, StopReplica (the
controller) and ControlledShutdown (a broker, to the controller).

WriteTxnMarkers is not guarded: besides transaction coordinators, Kafka's Admin.abortTransaction
(KIP-664) sends it from clients, and a Kafka broker without an authorizer serves it to anyone; with
an authorizer its handler requires ClusterAction.

A ZooKeeper-mode Kafka broker without an authorizer serves these requests to anyone who can connect.
pybroker's guard promises less than authentication and more than nothing: it stops a *blind*
forger, one who cannot read ZooKeeper. docs/security.md says what it does and does not stop.

- They are served only on the inter-broker listener (``inter.broker.listener.name``): with a
  separate, authenticated inter-broker listener no client listener takes them at all.
- With an authorizer (``authorizer.class.name``) the principal needs ClusterAction on the cluster
  (brokers are normally ``super.users``), as in Kafka; the checks below still follow.
- Controller requests: ``controller_id`` is the broker registered in /controller and
  ``controller_epoch`` the one in /controller_epoch (both read in one go when the pair is not the one
  already verified), so a forged epoch above ZooKeeper's is refused and never adopted;
  ``broker_epoch`` is the czxid of this broker's own registration; the peer's address is one the
  controller's registered host resolves to.
- ControlledShutdown: the peer's address is the registered host of the broker it names, and the
  broker epoch is that registration's.

Every request that fails any check gets the same answer, CLUSTER_AUTHORIZATION_FAILED (Kafka's when
ClusterAction is denied), after ``connection.failed.authentication.delay.ms``, and its connection is
closed: no answer tells a forger that a guess was closer (a lower epoch answered STALE_BROKER_EPOCH
and a higher one CLUSTER_AUTHORIZATION_FAILED, so 64 requests found a broker epoch by bisection),
and each guess costs a connection and a delay. A deposed controller's requests are refused the same
way; a controller does not act on the code. In single-node mode there is no other broker, so every
one of these requests is refused (a KRaft Kafka broker does not serve them to anyone either).

Limits, honestly: the address check proves only that the request comes from a machine a broker is
registered on (any process there passes it, as does anyone who can spoof or share that address), and
a ZooKeeper that has served few writes hands out small czxids, so a local process that can connect
can still find this broker's epoch by exhaustion, one refused request at a time. Real protection is
an inter-broker listener of its own with authentication (a shared SASL credential or mTLS), and an
authorizer with the brokers as super users.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pybroker.common.client_quotas import normalized_ip
from pybroker.common.clock import Clock
from pybroker.zk import paths as zp
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from pybroker.protocol.schema import Message
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster

if TYPE_CHECKING:
    from pybroker.server.context import RequestContext
    from pybroker.server.zk_mode import ZkMode

RESOLVE_TTL_S = 30.0


@dataclass(frozen=True, slots=True)
class _VerifiedController:
    broker_id: int
    epoch: int
    addresses: frozenset[str]


class InterBrokerGuard:
    """One per broker: it remembers the controller it verified and recent host resolutions."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock  # the resolutions' time to live
        self._controller: _VerifiedController | None = None
        self._resolved: dict[str, tuple[float, frozenset[str]]] = {}

    async def check(self, ctx: "RequestContext", request: Message) -> bool:
        """Whether ``request`` (of an API in GUARDED) may be served; refused ones all get one answer."""
        if ctx.session.listener != ctx.services.config.listener_set.inter_broker:
            return False
        if ctx.services.authorizer is not None and not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
            return False
        if isinstance(request, (LeaderAndIsrRequest, UpdateMetadataRequest, StopReplicaRequest)):
            return await self.controller_request(ctx, request.controller_id, request.controller_epoch,
                                                 request.broker_epoch)
        assert isinstance(request, ControlledShutdownRequest)
        return await self.controlled_shutdown(ctx, request.broker_id, request.broker_epoch)

    async def controller_request(self, ctx: "RequestContext", controller_id: int, controller_epoch: int,
                                 broker_epoch: int) -> bool:
        """Whether the request comes from the current controller to this run of this broker. A request
        arriving during start-up waits until this run registered: only then is its broker epoch known,
        and one for the previous run's registration (in ZooKeeper until its session expires) is refused."""
        zk_mode = ctx.services.zk_mode
        if zk_mode is None:
            return False
        await zk_mode.registered.wait()
        metadata = zk_mode.metadata
        assert metadata is not None
        if controller_epoch < metadata.controller_epoch:
            return False
        verified = self._controller
        if verified is None or (verified.broker_id, verified.epoch) != (controller_id, controller_epoch):
            verified = await self._read_controller(zk_mode, controller_id, controller_epoch)
            if verified is None:
                return False
            self._controller = verified
        if _peer_address(ctx) not in verified.addresses:
            return False
        if broker_epoch == metadata.broker_epoch:
            return True
        # Our registration may have happened a moment ago and the controller saw it first.
        registration = await self._registration(zk_mode, ctx.services.broker_id)
        return registration is not None and broker_epoch == registration.epoch

    async def controlled_shutdown(self, ctx: "RequestContext", broker_id: int, broker_epoch: int) -> bool:
        """Whether the peer is on the registered host of ``broker_id`` and names its registration."""
        zk_mode = ctx.services.zk_mode
        if zk_mode is None or zk_mode.metadata is None:
            return False
        registration = await self._registration(zk_mode, broker_id)
        return registration is not None and broker_epoch == registration.epoch and \
            _peer_address(ctx) in await self._addresses(registration.host)

    async def _read_controller(self, zk_mode: "ZkMode", controller_id: int,
                               controller_epoch: int) -> _VerifiedController | None:
        """The claimed controller and epoch, if they are ZooKeeper's."""
        zk = zk_mode.zk
        epoch_node = await zk.get(zp.CONTROLLER_EPOCH)
        if epoch_node is not None and zp.decode_controller_epoch(epoch_node[0]) < controller_epoch:
            await zk.sync(zp.CONTROLLER_EPOCH)  # a newer epoch may not have reached our ZooKeeper server yet
            epoch_node = await zk.get(zp.CONTROLLER_EPOCH)
        controller_node = await zk.get(zp.CONTROLLER)  # after the epoch: both come from one election or later
        if controller_node is None or epoch_node is None:
            return None
        if controller_epoch != zp.decode_controller_epoch(epoch_node[0]) or \
                zp.decode_controller(controller_node[0]) != controller_id:
            return None
        registration = await self._registration(zk_mode, controller_id)
        if registration is None:
            return None
        return _VerifiedController(controller_id, controller_epoch, await self._addresses(registration.host))

    @staticmethod
    async def _registration(zk_mode: "ZkMode", broker_id: int) -> zp.BrokerRegistration | None:
        node = await zk_mode.zk.get(zp.broker_path(broker_id))
        return None if node is None else zp.decode_broker(broker_id, node[0], node[1].czxid,
                                                          zk_mode.inter_broker_listener)

    async def _addresses(self, host: str) -> frozenset[str]:
        """The IP addresses ``host`` resolves to (cached briefly: controller requests come often)."""
        cached = self._resolved.get(host)
        now = self._clock.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
            addresses = frozenset(_normalized(info[4][0]) for info in infos if isinstance(info[4][0], str))
        except OSError:
            addresses = frozenset()
        self._resolved[host] = (now + RESOLVE_TTL_S, addresses)
        return addresses


def _normalized(address: str) -> str:
    """One spelling per address: IPv4-mapped IPv6 (a dual-stack socket's view) as plain IPv4."""
    return normalized_ip(address) or address


def _peer_address(ctx: "RequestContext") -> str:
    return _normalized(ctx.client_host.rpartition(":")[0])


GUARDED = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA, ApiKey.CONTROLLED_SHUTDOWN})


def refusal(request: Message, code: ErrorCode = ErrorCode.CLUSTER_AUTHORIZATION_FAILED) -> Message:
    """The answer to a refused guarded request (Kafka's getErrorResponse)."""
    if isinstance(request, LeaderAndIsrRequest):
        return LeaderAndIsrResponse(error_code=code, topics=[])
    if isinstance(request, UpdateMetadataRequest):
        return UpdateMetadataResponse(error_code=code)
    if isinstance(request, StopReplicaRequest):
        return StopReplicaResponse(error_code=code, partition_errors=[])
    assert isinstance(request, ControlledShutdownRequest)
    return ControlledShutdownResponse(error_code=code, remaining_partitions=[])
