"""AlterPartition (KIP-497) on the ZooKeeper-mode controller: a leader proposes a new ISR for a
partition it leads, at the leader epoch and partition epoch (the state znode's version) it knows; the
controller checks it as Kafka's KafkaController.processAlterPartition does, writes it with its own
controller epoch and publishes the change. This module is the check, without I/O."""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.common.topic import TopicPartition
from pybroker.zk import paths as zp
from pybroker.controller.context import ControllerContext
from pybroker.protocol.error_codes import ErrorCode

__all__ = ["IsrProposal", "check_proposal"]

RECOVERED, RECOVERING = 0, 1  # LeaderRecoveryState


@dataclass(frozen=True, slots=True)
class IsrProposal:
    key: TopicPartition
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    #: v3 (KIP-903): each new member's broker epoch as the leader saw it, -1 where not known
    member_epochs: tuple[int, ...] | None = None
    leader_recovery_state: int = RECOVERED


def check_proposal(ctx: ControllerContext, leader: int, proposal: IsrProposal) -> ErrorCode | zp.LeaderAndIsr:
    """The error to answer, or the state to write (equal to the current state when the proposal was
    already applied: a retry whose first answer was lost gets the current state back)."""
    state = ctx.states.get(proposal.key)
    if state is None or proposal.key[0] not in ctx.assignments:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if proposal.leader_epoch < state.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if state.leader != leader or proposal.leader_epoch != state.leader_epoch:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if leader not in proposal.isr or len(set(proposal.isr)) != len(proposal.isr):
        return ErrorCode.INVALID_REQUEST
    if set(proposal.isr) == set(state.isr) and proposal.partition_epoch <= state.zk_version:
        return state
    if proposal.partition_epoch != state.zk_version:
        return ErrorCode.INVALID_UPDATE_VERSION
    if proposal.leader_recovery_state == RECOVERING and len(proposal.isr) > 1:
        return ErrorCode.INVALID_REQUEST
    replicas = ctx.replicas(proposal.key)
    electable = ctx.electable()
    if any(member not in replicas or member not in electable for member in proposal.isr):
        return ErrorCode.INELIGIBLE_REPLICA
    if proposal.member_epochs is not None and any(
            epoch != -1 and ctx.brokers[member].epoch != epoch
            for member, epoch in zip(proposal.isr, proposal.member_epochs)):
        return ErrorCode.INELIGIBLE_REPLICA  # a member restarted since the leader saw it catch up
    return zp.LeaderAndIsr(state.leader, state.leader_epoch, proposal.isr, state.controller_epoch,
                           state.zk_version)
