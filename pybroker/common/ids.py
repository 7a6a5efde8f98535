"""Kinds of integer ids that travel side by side, told apart for the type checker.

A broker id, a leader epoch, a producer id and a producer epoch are all ints on the wire, and many
calls take several of them in a row (``LeaderAndIsr(leader, leader_epoch, isr, controller_epoch,
zk_version)``, ``add_partitions(producer_id, producer_epoch, ...)``): swapping two is a silent bug
that mypy reports once the parameters carry these types. They cost nothing at run time (a NewType
call returns its argument); a value read off the wire is wrapped where it enters the broker.
"""

from __future__ import annotations

from typing import NewType

__all__ = ["BrokerId", "LeaderEpoch", "ProducerEpoch", "ProducerId", "next_epoch"]

BrokerId = NewType("BrokerId", int)
"""A broker's ``broker.id``; also a replica's and a leader's id (-1: none)."""

LeaderEpoch = NewType("LeaderEpoch", int)
"""A partition's leader epoch: bumped by every leader election (-1: unknown or not checked)."""

ProducerId = NewType("ProducerId", int)
"""An idempotent or transactional producer's id (-1: none)."""

ProducerEpoch = NewType("ProducerEpoch", int)
"""The epoch of a producer id, bumped to fence an older instance (-1: none)."""


def next_epoch(epoch: LeaderEpoch) -> LeaderEpoch:
    """The leader epoch an election writes after ``epoch``."""
    return LeaderEpoch(epoch + 1)
