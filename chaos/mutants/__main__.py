"""`python -m chaos.mutants [--only a,b] [--duration 30]`: each mutant's rounds until one catches it."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from chaos.mutants import BY_NAME, MUTANTS, planted
from chaos.run import RoundResult, bounded_round


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.mutants", description=__doc__)
    parser.add_argument("--only", help="comma-separated mutant names (default: all)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of faults per round")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--keep-dir", type=Path, default=Path("chaos-runs/mutants"))
    parser.add_argument("--every-seed", action="store_true",
                        help="run each mutant's every seed, not only until the first catch (how often it is caught)")
    args = parser.parse_args(argv)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(128 + signal.SIGTERM))
    mutants = [BY_NAME[name] for name in args.only.split(",")] if args.only else list(MUTANTS)
    rows = ["| mutant | planted bug | rounds to first catch | caught | verdict |", "|---|---|---|---|---|"]
    missed = []
    for mutant in mutants:
        print(f"== mutant {mutant.name}: {mutant.bug}")
        results: list[RoundResult] = []
        with planted(mutant) as code_root:
            for seed in mutant.seeds:
                results.append(bounded_round(seed, args.duration, partitions=args.partitions, with_txn=mutant.txn,
                                             with_share=mutant.share, generator=mutant.generator,
                                             kinds=list(mutant.kinds),
                                             code_root=code_root, keep_dir=args.keep_dir))
                if results[-1].caught and not args.every_seed:
                    break
        caught = [r for r in results if r.caught]
        # a round that skipped a fault (nothing to aim at) and caught nothing did not test the mutant: not "clean"
        unexercised = [r for r in results if not r.caught and r.skipped]
        tally = f"{len(caught)} of {len(results)}" + (f", {len(unexercised)} not exercised" if unexercised else "")
        if not caught:
            missed.append(mutant.name)
            rows.append(f"| {mutant.name} | {mutant.bug} | {'not exercised' if len(unexercised) == len(results) else 'not caught'} | "
                        f"{tally} | {results[-1].outcome if results else 'no round'} |")
        else:
            first = results.index(caught[0]) + 1
            rows.append(f"| {mutant.name} | {mutant.bug} | {first} (seed {caught[0].seed}) | {tally} | "
                        f"{caught[0].verdict} |")
    print("\n".join(rows))
    if missed:
        print(f"NOT CAUGHT: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
