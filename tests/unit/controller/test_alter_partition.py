"""The controller's check of a leader's ISR proposal (AlterPartition, KIP-497), case by case as Kafka's
processAlterPartition answers them."""

from __future__ import annotations

from pybroker.zk import paths as zp
from pybroker.controller.alter_partition import RECOVERING, IsrProposal, check_proposal
from pybroker.controller.context import ControllerContext
from pybroker.protocol.error_codes import ErrorCode

KEY = ("t", 0)


def context() -> ControllerContext:
    """Replicas 1, 2, 3 (registration epochs 101, 102, 103) and 4 (not a replica); leader 1 at leader
    epoch 5, ISR (1, 2), partition epoch (znode version) 7."""
    ctx = ControllerContext(brokers={b: zp.BrokerRegistration(b, "h", 9092 + b, None, epoch=100 + b)
                                     for b in (1, 2, 3, 4)})
    ctx.assignments["t"] = zp.TopicAssignment({0: (1, 2, 3)}, None)
    ctx.states[KEY] = zp.LeaderAndIsr(1, 5, (1, 2), 3, 7)
    return ctx


def propose(isr: tuple[int, ...], *, leader_epoch: int = 5, partition_epoch: int = 7,
            member_epochs: tuple[int, ...] | None = None, recovery: int = 0) -> IsrProposal:
    return IsrProposal(KEY, leader_epoch, isr, partition_epoch, member_epochs, recovery)


def test_a_valid_expansion_is_the_state_to_write() -> None:
    assert check_proposal(context(), 1, propose((1, 2, 3))) == zp.LeaderAndIsr(1, 5, (1, 2, 3), 3, 7)
    assert check_proposal(context(), 1, propose((1,))) == zp.LeaderAndIsr(1, 5, (1,), 3, 7)


def test_a_retry_of_an_applied_proposal_gets_the_stored_state() -> None:
    """The first answer was lost: the leader asks again with the partition epoch it had."""
    ctx = context()
    ctx.states[KEY] = zp.LeaderAndIsr(1, 5, (1, 2, 3), 4, 8)
    assert check_proposal(ctx, 1, propose((1, 2, 3))) == ctx.states[KEY]


def test_stale_leaders_and_versions_are_refused() -> None:
    ctx = context()
    assert check_proposal(ctx, 1, propose((1, 2, 3), leader_epoch=4)) == ErrorCode.FENCED_LEADER_EPOCH
    assert check_proposal(ctx, 2, propose((1, 2, 3))) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert check_proposal(ctx, 1, propose((1, 2, 3), partition_epoch=6)) == ErrorCode.INVALID_UPDATE_VERSION
    unknown = IsrProposal(("t", 9), 5, (1,), 7)
    assert check_proposal(ctx, 1, unknown) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_only_live_replicas_that_did_not_restart_may_join() -> None:
    ctx = context()
    assert check_proposal(ctx, 1, propose((1, 2, 4))) == ErrorCode.INELIGIBLE_REPLICA  # not a replica
    ctx.shutting_down.add(3)
    assert check_proposal(ctx, 1, propose((1, 2, 3))) == ErrorCode.INELIGIBLE_REPLICA  # shutting down
    ctx = context()
    del ctx.brokers[3]
    assert check_proposal(ctx, 1, propose((1, 2, 3))) == ErrorCode.INELIGIBLE_REPLICA  # not registered
    ctx = context()
    bounced = propose((1, 2, 3), member_epochs=(101, 102, 99))  # v3: 3 re-registered since it caught up
    assert check_proposal(ctx, 1, bounced) == ErrorCode.INELIGIBLE_REPLICA
    assert isinstance(check_proposal(ctx, 1, propose((1, 2, 3), member_epochs=(101, 102, 103))), zp.LeaderAndIsr)
    assert isinstance(check_proposal(ctx, 1, propose((1, 2, 3), member_epochs=(-1, -1, -1))), zp.LeaderAndIsr)


def test_malformed_proposals_are_invalid_requests() -> None:
    ctx = context()
    assert check_proposal(ctx, 1, propose((2, 3))) == ErrorCode.INVALID_REQUEST  # without the leader
    assert check_proposal(ctx, 1, propose((1, 2, 2))) == ErrorCode.INVALID_REQUEST  # a member twice
    assert check_proposal(ctx, 1, propose((1, 2, 3), recovery=RECOVERING)) == ErrorCode.INVALID_REQUEST
