"""LeaderAndIsr (4), StopReplica (5) and UpdateMetadata (6): the controller's requests to brokers;
ControlledShutdown (7): a broker's request to the controller before it stops.

Served in the versions our controller sends (controller.py) and newer: LeaderAndIsr 5-7,
StopReplica 3-4, UpdateMetadata 7-8, ControlledShutdown 1-3 (v0 has its own request header).
A request from an older controller epoch than one this broker already obeyed is refused with
STALE_CONTROLLER_EPOCH; leader epochs are checked per partition as Kafka's ReplicaManager does: a
LeaderAndIsr partition state whose leader epoch is not newer than the replica's is skipped and
answered STALE_CONTROLLER_EPOCH (a new controller re-sends every partition's state), one whose
replicas do not include this broker UNKNOWN_TOPIC_OR_PARTITION, one whose topic id differs from the one
the replica's log records INCONSISTENT_TOPIC_ID (the log is left for the operator: log/stray_logs.py); a
StopReplica whose leader epoch is older than the replica's is FENCED_LEADER_EPOCH (-1, no epoch, and -2, a
topic being deleted, pass).
A log a StopReplica deletes is logged at WARN with the controller and address that asked.

Each of the three also carries the broker epoch (the czxid of the registration) the controller sent
it to: one older than this broker's own was meant for an earlier run of this broker (it restarted,
KIP-380) and is refused with STALE_BROKER_EPOCH, as Kafka's KafkaApis does; -1 skips the check.
Who may send them at all is checked before they get here (`inter_broker_guard`). Topic names are
checked again (INVALID_TOPIC_EXCEPTION) before a LeaderAndIsr or StopReplica turns one into a path. A new
replica past the descriptor budget (``pybroker.common.open_files``) is answered KAFKA_STORAGE_ERROR: the
controller then treats it as offline, as a replica in a failed log dir. A new replica's log is made off the
event loop (`RoleChanges.apply_role_async`), those of one topic at once, and the answer waits for them all.
So does an existing replica's new leader epoch: the request's `leader-epoch-checkpoint` writes go to the I/O
executor together (`RoleChanges.apply_role_later`), and each replica leads once its file is durable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Awaitable, Iterable

from pybroker.common.ids import BrokerId, LeaderEpoch
from pybroker.common.log_limit import LogLimiter
from pybroker.common.open_files import OpenFilesLimitError
from pybroker.common.topic import TopicPartition, topic_name_error
from pybroker.common.uncancellable import run_to_end
from pybroker.controller.errors import NotControllerError, StaleBrokerEpochError
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
from pybroker.replication.epoch_writes import EpochWrites
from pybroker.replication.manager import PartitionRole
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.registry import api

if TYPE_CHECKING:
    from pybroker.controller.zk_metadata import ZkMetadata

PartitionError = LeaderAndIsrResponse.LeaderAndIsrPartitionError
TopicError = LeaderAndIsrResponse.LeaderAndIsrTopicError
NO_EPOCH, EPOCH_DURING_DELETE = -1, -2  # Kafka's LeaderAndIsr.NoEpoch and EpochDuringDelete
limited_log = LogLimiter(logging.getLogger("pybroker.server"))


def _metadata(ctx: RequestContext) -> ZkMetadata | None:
    """This broker's cluster metadata; None in single-node mode, where no controller exists."""
    return ctx.services.zk_mode.metadata if ctx.services.zk_mode is not None else None


def _stale(ctx: RequestContext, controller_epoch: int) -> bool:
    metadata = _metadata(ctx)
    return metadata is None or controller_epoch < metadata.controller_epoch


def _stale_broker_epoch(ctx: RequestContext, broker_epoch: int) -> bool:
    metadata = _metadata(ctx)
    return metadata is not None and broker_epoch != -1 and broker_epoch < metadata.broker_epoch


def _descriptor_for(ctx: RequestContext, topic: str, index: int) -> bool:
    """Whether a new replica's log fits the descriptor budget. A broker asked for more replicas than its open
    files limit holds (the broker that took the CreateTopics checked only its own) reports those it cannot
    open as offline, with one log line, rather than failing half-way through their files."""
    try:
        ctx.services.open_files.admit(1, f"replica {topic}-{index}")
    except OpenFilesLimitError as exc:
        limited_log.warning("open-files", "%s", exc)
        return False
    return True


@api(ApiKey.LEADER_AND_ISR, 5, 7)
async def leader_and_isr(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    if _stale_broker_epoch(ctx, request.broker_epoch):
        return LeaderAndIsrResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, topics=[])
    if _stale(ctx, request.controller_epoch):
        return LeaderAndIsrResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH, topics=[])
    services = ctx.services
    metadata = _metadata(ctx)
    assert metadata is not None
    metadata.controller_epoch = request.controller_epoch
    leaders = {leader.broker_id: (leader.host_name, leader.port) for leader in request.live_leaders}
    epoch_writes = EpochWrites(services.io)
    later: list[tuple[list[PartitionError], int, Awaitable[None]]] = []  # roles leading once the writes are durable
    try:
        topics = [await _apply_topic(ctx, metadata, topic, leaders, epoch_writes, later)
                  for topic in request.topic_states]
    finally:  # even when a topic failed or the controller's connection closed: nothing may stay fenced
        outcomes = await run_to_end(_lead_when_durable(epoch_writes, [role for _, _, role in later]))
    for (errors, position, _), outcome in zip(later, outcomes):
        _record_outcomes(errors, [(position, outcome)])
    return LeaderAndIsrResponse(error_code=0, topics=topics)


async def _apply_topic(ctx: RequestContext, metadata: ZkMetadata, topic: LeaderAndIsrRequest.LeaderAndIsrTopicState,
                       leaders: dict[int, tuple[str, int]], epoch_writes: EpochWrites,
                       later: list[tuple[list[PartitionError], int, Awaitable[None]]]) -> TopicError:
    """One topic's partition states: applied at once, or (a new log, a new leader epoch) queued and awaited."""
    services = ctx.services
    if topic_name_error(topic.topic_name):
        return TopicError(topic_id=topic.topic_id, partition_errors=[
            PartitionError(partition_index=state.partition_index, error_code=ErrorCode.INVALID_TOPIC_EXCEPTION)
            for state in topic.partition_states])
    configs = await metadata.configs_for(topic.topic_name)
    log_config = services.topic_configs.log_config(configs)
    min_isr = services.topic_configs.min_insync_replicas(configs)
    errors: list[PartitionError] = []
    creations: dict[int, Awaitable[None]] = {}  # position in errors -> the role waiting for its new log
    for state in topic.partition_states:
        code = ErrorCode.NONE
        try:
            hosted = services.replica_manager.hosted(topic.topic_name, state.partition_index)
            if services.log_manager.is_offline(topic.topic_name, state.partition_index):
                code = ErrorCode.KAFKA_STORAGE_ERROR  # Kafka's HostedPartition.Offline, before any epoch check
            elif not services.replica_manager.has_consistent_topic_id(topic.topic_name, state.partition_index,
                                                                      topic.topic_id):
                code = ErrorCode.INCONSISTENT_TOPIC_ID  # a log left from an earlier topic of this name
            elif hosted is not None and state.leader_epoch <= hosted.leader_epoch:
                code = ErrorCode.STALE_CONTROLLER_EPOCH
            elif services.broker_id not in state.replicas:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif hosted is None and not _descriptor_for(ctx, topic.topic_name, state.partition_index):
                code = ErrorCode.KAFKA_STORAGE_ERROR  # an offline replica: the controller elects around it
            else:
                role = PartitionRole(topic.topic_name, state.partition_index, topic.topic_id,
                                     BrokerId(state.leader), LeaderEpoch(state.leader_epoch),
                                     tuple(state.replicas), tuple(state.isr),
                                     state.partition_epoch, state.controller_epoch)
                changes = services.replica_manager.role_changes
                if changes.must_create_log(topic.topic_name, state.partition_index):
                    creations[len(errors)] = changes.apply_role_async(
                        role, leaders.get(state.leader), config=log_config, min_insync_replicas=min_isr)
                elif changes.must_apply_later(role):
                    later.append((errors, len(errors), changes.apply_role_later(
                        role, leaders.get(state.leader), config=log_config, min_insync_replicas=min_isr,
                        writes=epoch_writes)))
                else:
                    services.replica_manager.apply_role(role, leaders.get(state.leader), config=log_config,
                                                        min_insync_replicas=min_isr)
        except Exception as exc:
            code = error_code_for(exc)
        errors.append(PartitionError(partition_index=state.partition_index, error_code=code))
    outcomes = await asyncio.gather(*creations.values(), return_exceptions=True)
    _record_outcomes(errors, zip(creations, outcomes))
    return TopicError(topic_id=topic.topic_id, partition_errors=errors)


async def _lead_when_durable(writes: EpochWrites, roles: list[Awaitable[None]]) -> list[BaseException | None]:
    """Write a request's leader epochs, then let the replicas waiting for them lead; run to its end (`run_to_end`),
    which a cancelled request (its connection closed) does not stop half-way."""
    waiting = [asyncio.ensure_future(role) for role in roles]
    await writes.write()
    return await asyncio.gather(*waiting, return_exceptions=True)


def _record_outcomes(errors: list[PartitionError], outcomes: Iterable[tuple[int, object]]) -> None:
    """The error codes of roles applied after the loop over a topic's partitions (position in ``errors``, outcome)."""
    for position, outcome in outcomes:
        if isinstance(outcome, Exception):
            errors[position] = PartitionError(partition_index=errors[position].partition_index,
                                              error_code=error_code_for(outcome))
        elif isinstance(outcome, BaseException):
            raise outcome


@api(ApiKey.UPDATE_METADATA, 7, 8)
async def update_metadata(ctx: RequestContext, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    if _stale_broker_epoch(ctx, request.broker_epoch):
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    if _stale(ctx, request.controller_epoch):
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    metadata = _metadata(ctx)
    assert metadata is not None
    await metadata.apply_update(request)
    return UpdateMetadataResponse(error_code=0)


@api(ApiKey.STOP_REPLICA, 3, 4)
async def stop_replica(ctx: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse:
    if _stale_broker_epoch(ctx, request.broker_epoch):
        return StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, partition_errors=[])
    if _stale(ctx, request.controller_epoch):
        return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH, partition_errors=[])
    errors = []
    deleted: dict[TopicPartition, StopReplicaResponse.StopReplicaPartitionError] = {}
    replicas = ctx.services.replica_manager
    source = f"StopReplica from controller {request.controller_id} (epoch {request.controller_epoch}) at " \
             f"{ctx.client_host}"
    for topic in request.topic_states:
        for state in topic.partition_states:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_error(topic.topic_name) else ErrorCode.NONE
            delete = False
            try:
                hosted = replicas.hosted(topic.topic_name, state.partition_index) if code is ErrorCode.NONE else None
                if hosted is not None and state.leader_epoch not in (NO_EPOCH, EPOCH_DURING_DELETE) and \
                        state.leader_epoch < hosted.leader_epoch:
                    code = ErrorCode.FENCED_LEADER_EPOCH
                elif code is ErrorCode.NONE:
                    delete = replicas.stop_replica(topic.topic_name, state.partition_index,
                                                   delete=state.delete_partition, source=source)
            except Exception as exc:
                code = error_code_for(exc)
            errors.append(StopReplicaResponse.StopReplicaPartitionError(
                topic_name=topic.topic_name, partition_index=state.partition_index, error_code=code))
            if delete:
                deleted[TopicPartition(topic.topic_name, state.partition_index)] = errors[-1]
    try:  # together: one fsync per log dir, the files removed off the loop
        ctx.services.log_manager.delete_logs(deleted)
    except Exception as exc:
        for error in deleted.values():
            error.error_code = error_code_for(exc)
    return StopReplicaResponse(error_code=0, partition_errors=errors)


@api(ApiKey.CONTROLLED_SHUTDOWN, 1, 3)
async def controlled_shutdown(ctx: RequestContext, request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    zk_mode = ctx.services.zk_mode
    controller = zk_mode.controller if zk_mode is not None else None
    if controller is None or not controller.active:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER, remaining_partitions=[])
    try:
        remaining = await controller.controlled_shutdown(request.broker_id, request.broker_epoch)
    except NotControllerError:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER, remaining_partitions=[])
    except StaleBrokerEpochError:
        return ControlledShutdownResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, remaining_partitions=[])
    return ControlledShutdownResponse(error_code=0, remaining_partitions=[
        ControlledShutdownResponse.RemainingPartition(topic_name=topic, partition_index=index)
        for topic, index in remaining])
