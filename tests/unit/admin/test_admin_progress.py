"""The tools' progress line: drawn in place on a terminal, silent anywhere else."""

from __future__ import annotations

import io

import pytest

from pybroker.common.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def redraws(stream: io.StringIO) -> list[str]:
    """The successive states of the line, as a terminal would show them one after another."""
    return [state for state in stream.getvalue().split("\r") if state]


def test_a_terminal_sees_the_count_redrawn_in_place_and_the_final_line_kept() -> None:
    terminal = FakeTerminal()
    with Progress("Resolving new offsets of group 'g'", 3, "partitions", stream=terminal) as progress:
        progress.advance()
        progress.advance(2)
    assert redraws(terminal) == ["Resolving new offsets of group 'g': 0/3 partitions (0%)",
                                 "Resolving new offsets of group 'g': 1/3 partitions (33%)",
                                 "Resolving new offsets of group 'g': 3/3 partitions (100%)\n"]


def test_many_steps_redraw_only_when_the_percentage_moves() -> None:
    terminal = FakeTerminal()
    with Progress("Reading partition states", 1000, "partitions", stream=terminal) as progress:
        for _ in range(1000):
            progress.advance()
    states = redraws(terminal)
    assert len(states) == 101
    assert states[1] == "Reading partition states: 10/1000 partitions (1%)"
    assert states[-1] == "Reading partition states: 1000/1000 partitions (100%)\n"


def test_a_failure_midway_leaves_the_partial_count_on_its_own_line() -> None:
    terminal = FakeTerminal()
    with pytest.raises(RuntimeError), Progress("Reassignment", 4, "partitions completed", stream=terminal) as progress:
        progress.advance()
        raise RuntimeError("broker went away")
    assert terminal.getvalue().endswith("\rReassignment: 1/4 partitions completed (25%)\n")


def test_a_pipe_or_file_gets_nothing() -> None:
    piped = io.StringIO()
    with Progress("Reassignment", 4, "partitions completed", stream=piped) as progress:
        progress.advance(4)
    assert piped.getvalue() == ""


def test_nothing_to_do_draws_nothing() -> None:
    terminal = FakeTerminal()
    with Progress("Reassignment", 0, "partitions completed", stream=terminal):
        pass
    assert terminal.getvalue() == ""
