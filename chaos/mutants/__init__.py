"""Mutation testing of the harness: known safety bugs, planted one at a time, that the rounds must catch.

Each mutant is a patch of a few lines beside this file (`<name>.patch`, made with `git diff` from the
repository root). It is applied to a copy of `pybroker/` in a temporary directory, and the round's
brokers run from that copy (cluster.py's `code_root`); the repository itself is never changed and no
configuration reaches a planted bug. A patch that no longer applies (the code moved) fails loudly,
naming the mutant: re-make it against the new code.

`python -m chaos.mutants` (`make chaos-mutants`) runs every mutant's rounds at its seeds until one
is caught, a safety anomaly found (a heal failure alone is not a catch), and fails unless every mutant
was caught. A round that skipped a fault it drew (nemesis.py found nothing to aim it at) and caught nothing
is counted as not exercised, not as a clean round. With `--control` each mutant's catching round runs again on
the unpatched code, which must stay clean: otherwise the catch was the broker's own bug (or a flake), not the
planted one.

A round's seed comes from the run's (`--seed`, SEED by default, so that `make chaos-mutants` runs the same rounds
each time) and the round: the mutant's place in MUTANTS and its round's, so no two rounds of a run share one,
whichever mutants it runs (each round's process also seeds `random` with it and has ports of its own: run.py's
bounded_round). The mutants runner prints each with the `python -m chaos` command that replays it alone.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from chaos.cluster import REPO

HERE = Path(__file__).resolve().parent
SEED = 11  # a run's seed unless --seed says otherwise
SEED_STRIDE = 10  # between two mutants' first seeds: more than any mutant's rounds


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    kinds: tuple[str, ...]  # the faults its rounds draw from (faults.py)
    rounds: int = 3  # at most, until one catches it
    txn: bool = False
    share: bool = False
    generator: str = "overlapping"

    @property
    def patch(self) -> Path:
        return HERE / f"{self.name}.patch"

    def seeds(self, run_seed: int = SEED) -> tuple[int, ...]:
        """Its rounds' seeds in a run at `run_seed`: SEED_STRIDE apart from the next mutant's."""
        first = run_seed + SEED_STRIDE * MUTANTS.index(self)
        return tuple(range(first, first + self.rounds))


MUTANTS = (
    Mutant("hw-without-isr", "the high watermark advances to the leader's log end without the ISR",
           ("kill", "power-loss")),
    Mutant("no-truncate", "a new follower never truncates to the leader's epoch end",
           ("lag-then-isolate",), rounds=5, generator="aimed"),
    Mutant("elect-outside-isr", "the controller elects the first live replica in assignment order, in the ISR or not",
           ("lag-then-kill", "lag-then-isolate", "lag-then-power-loss"), generator="aimed"),
    Mutant("ack-at-append", "acks=all answered at the leader's append", ("kill", "power-loss")),
    Mutant("no-dedupe", "the idempotent producer's duplicate check skipped", ("clients-cut", "isolate")),
    Mutant("abort-as-commit", "abort markers written as commit markers", ("pause-short",), txn=True),
    Mutant("failover-misses-restart", "a new controller does not see brokers that restarted before it was elected "
           "(chaos seed 6)", ("controller-bounce",), generator="aimed"),
    Mutant("released-before-written", "a released or timed-out share record is acquired again before its delivery "
           "count is written (share chaos seed 17)", ("share-stall-then-kill",), share=True, generator="aimed"),
)
BY_NAME = {m.name: m for m in MUTANTS}


class PatchError(RuntimeError):
    """A mutant's patch no longer applies to the code."""


def apply_to(mutant: Mutant, tree: Path, *, check: bool = False) -> None:
    """Apply the mutant's patch under `tree` (which holds `pybroker/`); `check` only tries it."""
    args = ["git", "apply", "--verbose", *(["--check"] if check else []), str(mutant.patch)]
    done = subprocess.run(args, cwd=tree, capture_output=True, text=True)
    if done.returncode:
        raise PatchError(f"mutant {mutant.name}: {mutant.patch.name} no longer applies to {tree}/pybroker "
                         f"(re-make it against the current code):\n{done.stderr.strip()}")


@contextmanager
def planted(mutant: Mutant) -> Iterator[Path]:
    """A temporary copy of the repository's `pybroker/` with the mutant applied: a `code_root`."""
    root = Path(tempfile.mkdtemp(prefix=f"mutant-{mutant.name}-"))
    try:
        shutil.copytree(REPO / "pybroker", root / "pybroker",  # the sources: a compiled build would hide the patch
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
        apply_to(mutant, root)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
