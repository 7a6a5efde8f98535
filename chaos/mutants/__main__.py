"""`python -m chaos.mutants [--only a,b] [--duration 30] [--seed 11] [--control]`: each mutant's rounds until one
catches it. Each round's seed is printed with the `python -m chaos` command that replays it on the unpatched code.

With --control, each mutant's catching round (its first seed when none caught it) is run again on the repository's
own code: a catch is the planted bug's only when that control round is clean of safety anomalies; one that is not
found a bug of the broker as it is (or a harness flake) with the same faults, and fails the run as a miss does."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from chaos.cluster import REPO
from chaos.mutants import BY_NAME, MUTANTS, SEED, Mutant, planted
from chaos.run import HARNESS_HANG, RoundResult, bounded_round


def replay(mutant: Mutant, seed: int, args: argparse.Namespace) -> str:
    """The command that runs this round alone (`python -m chaos` runs the repository's code: the control)."""
    return (f"python -m chaos --rounds 1 --no-expected-loss --seed {seed} --duration {args.duration:g} "
            f"--partitions {args.partitions} --schedule {mutant.generator} --kinds {','.join(mutant.kinds)}"
            + " --txn" * mutant.txn + " --share" * mutant.share)


def _round(mutant: Mutant, seed: int, args: argparse.Namespace, code_root: Path) -> RoundResult:
    print(f"== {mutant.name}{' control' if code_root == REPO else ''} round, seed {seed}; alone on the unpatched code: "
          f"{replay(mutant, seed, args)}")
    return bounded_round(seed, args.duration, partitions=args.partitions, with_txn=mutant.txn,
                         with_share=mutant.share, generator=mutant.generator, kinds=list(mutant.kinds),
                         code_root=code_root, keep_dir=args.keep_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.mutants", description=__doc__)
    parser.add_argument("--only", help="comma-separated mutant names (default: all)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of faults per round")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--seed", type=int, default=SEED,
                        help="the run's: a mutant's rounds are at seeds derived from it (chaos/mutants/__init__.py)")
    parser.add_argument("--keep-dir", type=Path, default=Path("chaos-runs/mutants"))
    parser.add_argument("--every-seed", action="store_true",
                        help="run each mutant's every seed, not only until the first catch (how often it is caught)")
    parser.add_argument("--control", action="store_true",
                        help="run each mutant's catching round again on the unpatched code, which must stay clean")
    args = parser.parse_args(argv)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(128 + signal.SIGTERM))
    mutants = [BY_NAME[name] for name in args.only.split(",")] if args.only else list(MUTANTS)
    rows = ["| mutant | planted bug | rounds to first catch | caught | verdict |" + (" control |" * args.control),
            "|---|---|---|---|---|" + ("---|" * args.control)]
    missed, unclean = [], []
    for mutant in mutants:
        print(f"== mutant {mutant.name}: {mutant.bug}")
        results: list[RoundResult] = []
        with planted(mutant) as code_root:
            for seed in mutant.seeds(args.seed):
                results.append(_round(mutant, seed, args, code_root))
                if results[-1].caught and not args.every_seed:
                    break
        caught = [r for r in results if r.caught]
        control = ""
        if args.control:
            seed = caught[0].seed if caught else mutant.seeds(args.seed)[0]
            result = _round(mutant, seed, args, REPO)
            control = f" seed {seed}: {result.outcome}" + (f" (kept {result.kept})" if result.kept else "") + " |"
            if result.caught or result.verdict.startswith(("error", HARNESS_HANG)):
                unclean.append(mutant.name)
        # a round that skipped a fault (nothing to aim at) and caught nothing did not test the mutant: not "clean"
        unexercised = [r for r in results if not r.caught and r.skipped]
        tally = f"{len(caught)} of {len(results)}" + (f", {len(unexercised)} not exercised" if unexercised else "")
        if not caught:
            missed.append(mutant.name)
            rows.append(f"| {mutant.name} | {mutant.bug} | {'not exercised' if len(unexercised) == len(results) else 'not caught'} | "
                        f"{tally} | {results[-1].outcome if results else 'no round'} |" + control)
        else:
            first = results.index(caught[0]) + 1
            rows.append(f"| {mutant.name} | {mutant.bug} | {first} (seed {caught[0].seed}) | {tally} | "
                        f"{caught[0].verdict} |" + control)
    print("\n".join(rows))
    if missed:
        print(f"NOT CAUGHT: {', '.join(missed)}")
    if unclean:
        print(f"CONTROL NOT CLEAN (the unpatched code, same round): {', '.join(unclean)}")
    return 1 if missed or unclean else 0


if __name__ == "__main__":
    sys.exit(main())
