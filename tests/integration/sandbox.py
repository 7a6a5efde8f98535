"""Plans of shell steps run in private network and mount namespaces (sandbox_runner.py does the running).

A user's commands name fixed addresses and paths: `pybroker serve` binds 127.0.0.1:9092, the samples write to
/tmp/kafka-logs and /tmp/zookeeper. Run as they are on a shared machine they would meet other tests and other
people's brokers; in a namespace of its own each plan has its own loopback and its own empty copies of those
directories, so the commands run unchanged and parallel test workers never collide. Needs `unshare`
(util-linux) and `ip` (iproute2), and the right to create namespaces (root, as `make test` runs here).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

RUNNER = Path(__file__).with_name("sandbox_runner.py")
UNSHARE = ["unshare", "--net", "--mount", "--propagation", "private", "--"]


@dataclass(frozen=True)
class Step:
    name: str
    kind: str  # "run": must exit 0; "server": started in the background, ready once its ports accept connections
    script: str
    ports: tuple[int, ...] = ()
    timeout: float = 90.0


@dataclass
class Outcome:
    name: str
    ok: bool
    output: str
    why: str = ""


@dataclass
class Plan:
    steps: list[Step]
    work: Path
    env: dict[str, str]
    private_dirs: list[str] = field(default_factory=list)


@functools.cache
def sandbox_error() -> str | None:
    """Why plans cannot run on this machine, or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare (util-linux) and ip (iproute2): tools/install-system-deps.sh installs them"
    probe = subprocess.run([*UNSHARE, "ip", "link", "set", "lo", "up"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot create network and mount namespaces here (root needed): {probe.stderr.strip()}"
    return None


def run_plan(plan: Plan, python: str = sys.executable, timeout: float = 900.0) -> list[Outcome]:
    reason = sandbox_error()
    if reason is not None:
        pytest.skip(reason)
    plan.work.mkdir(parents=True, exist_ok=True)
    plan_file = plan.work.parent / f"{plan.work.name}-plan.json"
    plan_file.write_text(json.dumps({"steps": [asdict(step) for step in plan.steps], "work": str(plan.work),
                                     "env": plan.env, "private_dirs": plan.private_dirs}))
    result = subprocess.run([*UNSHARE, python, str(RUNNER), str(plan_file)], capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stderr[-5000:]
    return [Outcome(**outcome) for outcome in json.loads(result.stdout)["steps"]]


def report(outcomes: list[Outcome], planned: int) -> str:
    """The failed step (or the missing ones) with its output, for an assertion message."""
    failed = [o for o in outcomes if not o.ok]
    if failed:
        step = failed[0]
        return f"step {step.name!r} failed ({step.why}):\n{step.output[-4000:]}"
    return f"only {len(outcomes)} of {planned} steps ran"
