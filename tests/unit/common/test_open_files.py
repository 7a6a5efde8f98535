"""The descriptor budget: partitions are admitted while the open files limit, less its headroom, holds them."""

from __future__ import annotations

import errno
import resource

import pytest

from pybroker.common.open_files import (
    DescriptorBudget,
    OpenFilesLimitError,
    is_descriptor_exhaustion,
    open_descriptors,
    raise_open_files_limit,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_partitions_are_admitted_until_the_limit_less_the_headroom_and_refused_naming_it() -> None:
    open_now = [100]
    clock = Clock()
    budget = DescriptorBudget(2000, 500, count=lambda: open_now[0], clock=clock)
    assert budget.capacity == 1500
    budget.admit(900, "topic 'a'")
    budget.admit(500, "topic 'b'")  # 1,500: the measurement a moment ago does not show them, the count does
    with pytest.raises(OpenFilesLimitError) as refused:
        budget.admit(1, "topic 'c'")
    assert "topic 'c'" in str(refused.value) and "RLIMIT_NOFILE 2000" in str(refused.value)
    assert "500 are kept" in str(refused.value)
    budget.admit(0, "no partitions here")
    clock.now += 1
    open_now[0] = 1200  # measured again: the partitions admitted since were created
    budget.admit(300, "topic 'c'")
    with pytest.raises(OpenFilesLimitError):
        budget.admit(1, "topic 'd'")


def test_a_validate_only_check_takes_nothing() -> None:
    budget = DescriptorBudget(1000, 100, count=lambda: 0, clock=Clock())
    for _ in range(5):
        budget.admit(900, "topic 'a'", count_in=False)
    budget.admit(900, "topic 'a'")
    with pytest.raises(OpenFilesLimitError):
        budget.admit(1, "topic 'b'", count_in=False)


def test_the_headroom_is_at_most_a_quarter_of_a_small_limit() -> None:
    assert DescriptorBudget(1024, 1024, count=lambda: 0).capacity == 768
    assert DescriptorBudget(1_000_000, 1024, count=lambda: 0).capacity == 1_000_000 - 1024


def test_out_of_descriptors_is_recognised_through_wrapping_exceptions() -> None:
    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError as exc:
            raise RuntimeError("storage failed") from exc
    except RuntimeError as wrapped:
        assert is_descriptor_exhaustion(wrapped)
    assert is_descriptor_exhaustion(OSError(errno.ENFILE, "Too many open files in system"))
    assert not is_descriptor_exhaustion(OSError(errno.EIO, "Input/output error"))
    assert not is_descriptor_exhaustion(None)


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 64:
            resource.setrlimit(resource.RLIMIT_NOFILE, (64 + open_descriptors(), hard))
            assert raise_open_files_limit() == hard
            assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
        assert raise_open_files_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
