"""How long the pytest plugin's fixtures take to a first acknowledged produce, against the broker's own start-up.

Runs a one-test suite N times, each in a fresh interpreter as a user's `pytest` would: the test asks for
``kafka_broker`` and ``kafka_topic`` and produces one acks=all record with confluent-kafka. From the moment the
``kafka_broker`` fixture starts, it reports when the broker logged that it is listening and when the produce was
acknowledged. For scale it also starts the bare broker (`python -m pybroker serve`, nothing else running in the
parent) N times: its own readiness, from the fork to that line. Prints the medians.
Usage: python tools/fixture_startup.py [-n 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFTEST = '''
import time

import pytest

STARTED = []


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.argname == "kafka_broker":
        STARTED.append(time.time())
    return (yield)
'''

TEST = '''
import json
import os
import re
import time
from datetime import datetime

from confluent_kafka import Producer

from conftest import STARTED


def test_first_produce(kafka_broker, kafka_topic):
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "acks": "all", "linger.ms": 0})
    producer.produce(kafka_topic, b"first")
    assert producer.flush(30) == 0
    acked = time.time()
    line = next(line for line in kafka_broker.node.child.lines if "listening on" in line)
    stamp = re.match(r"\\[([^\\]]+)\\]", line).group(1)
    ready = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    with open(os.environ["FIXTURE_STARTUP_OUT"], "w") as out:
        json.dump({"ready_s": ready - STARTED[0], "acked_s": acked - STARTED[0]}, out)
'''


def run_once(work: Path) -> dict[str, float]:
    out = work / "result.json"
    env = {**os.environ, "FIXTURE_STARTUP_OUT": str(out)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_startup.py"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-2000:] + result.stderr[-2000:])
    return json.loads(out.read_text())


def bare_start(work: Path) -> float:
    """Seconds from starting `pybroker serve` to its listening line, the parent doing nothing meanwhile."""
    data = work / "bare"
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "pybroker", "serve", "/dev/null",
                              "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}"],
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stderr is not None
        for line in child.stderr:
            if "listening on" in line:
                return time.perf_counter() - started
        raise RuntimeError("the broker exited before listening")
    finally:
        child.kill()
        child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="runs (default 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fixture-startup-") as tmp:
        work = Path(tmp)
        (work / "conftest.py").write_text(CONFTEST)
        (work / "test_startup.py").write_text(TEST)
        runs = [run_once(work) for _ in range(args.n)]
        bare = statistics.median(bare_start(work) for _ in range(args.n))
    ready = statistics.median(r["ready_s"] for r in runs)
    acked = statistics.median(r["acked_s"] for r in runs)
    gaps = statistics.median(r["acked_s"] - r["ready_s"] for r in runs)
    print(f"{args.n} runs, medians: bare broker listening {bare:.3f} s; under the fixture: broker listening "
          f"{ready:.3f} s, first produce acknowledged {acked:.3f} s ({acked - bare:+.3f} s after the bare broker's "
          f"readiness), {gaps:.3f} s after its own listening line")


if __name__ == "__main__":
    main()
