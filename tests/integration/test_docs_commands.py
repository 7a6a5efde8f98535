"""Every shell block of the docs (```sh in docs/*.md and README.md) runs, as written, in the session a reader would
have: the wheel installed as a pip user installs it (wheel_venv.py), kcat, a HOME of its own, and a sandbox
(sandbox.py) where 127.0.0.1:9092 and the samples' /tmp paths are the page's own.

Each page is one plan, its blocks in order, each of which must exit 0. A block that starts a server (SERVERS) runs in
the background until the page ends, ready once its ports accept connections; a page that starts no broker on
127.0.0.1:9092 gets the one getting-started.md starts there (`pybroker serve`, no config file). The blocks that cannot run here are in SKIPPED,
each with its reason; a test checks that every entry there still names a block.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pybroker.common.config import parse_properties
from pybroker.samples import sample_names, sample_text
from tests.integration.doc_blocks import REPO, Block, doc_pages, fenced_blocks
from tests.integration.sandbox import Plan, Step, report, run_plan
from tests.integration.wheel_venv import WheelVenv

#: (page, text the block contains) -> why it does not run in `make test`
SKIPPED: dict[tuple[str, str], str] = {
    ("docs/getting-started.md", "pip install pybroker"): "installs into the reader's environment; test_wheel.py "
                                                         "installs the built wheel into a fresh venv instead",
    ("docs/testing.md", "pip install 'pybroker[testing]'"): "installs into the reader's environment; test_wheel.py "
                                                            "runs this page's examples from the installed wheel",
    ("README.md", "make test"): "the test suite itself",
    ("README.md", "pip install pybroker"): "installs into the reader's environment (see test_wheel.py)",
    ("docs/scaling.md", "broker-$i.properties"): "a sketch: needs the four broker files it describes and a "
                                                 "ZooKeeper ensemble at zk1..zk3; docs/cluster.md's cluster runs",
    ("docs/operations.md", "docker build"): "no Docker engine here; test_cli_docker.py replays the Dockerfile's "
                                            "install, CMD and HEALTHCHECK",
    ("docs/spark.md", "pybroker.spark_jobs.generate"): "Spark jobs take minutes; tests/spark runs each job with "
                                                      "these flags",
    ("docs/spark.md", "spark-submit --packages"): "reaches Maven Central, which this machine cannot",
    ("docs/sizing.md", "sysctl -w vm.max_map_count"): "changes a kernel setting of the whole machine, "
                                                     "not a test's to change",
}

#: the first command of a block that starts a server -> the ports that accept connections once it is ready (those
#: of a `listeners=` override in the command instead, when it has one), and whether it is a Kafka broker
SERVERS: dict[str, tuple[tuple[int, ...], bool]] = {
    r"for n in 0 1 2; do pybroker serve server-\$n\.properties": ((9092, 9093, 9094), True),  # the cluster sample
    r"java .*ZooKeeperServerMain": ((2181,), False),
    r"pybroker serve sasl-ssl\.properties": ((9094,), True),
    r"pybroker serve\b": ((9092,), True),
    r"pybroker console\s": ((8080,), False),
}
DEFAULT_BROKER = Step("the broker of docs/getting-started.md", "server", "pybroker serve", ports=(9092,))


def sample_dirs() -> list[str]:
    """The fixed directories the samples write to (log.dirs, ZooKeeper's dataDir): private and empty in every
    page's sandbox, so a page never meets another run's data there, nor anyone's real data."""
    found = set()
    for sample in sample_names():
        values = parse_properties(sample_text(sample))
        for key in ("log.dirs", "log.dir", "dataDir"):
            found.update(path.strip() for path in values.get(key, "").split(",") if path.strip().startswith("/"))
    return sorted(found)


def skip_reason(block: Block) -> str | None:
    return next((why for (page, text), why in SKIPPED.items() if page == block.page and text in block.text), None)


def first_command(block: Block) -> str:
    return next((line for line in block.text.splitlines() if line.strip() and not line.startswith("#")), "")


def server_of(block: Block) -> tuple[tuple[int, ...], bool] | None:
    command = first_command(block)
    for pattern, (ports, broker) in SERVERS.items():
        if re.match(pattern, command):
            overridden = tuple(int(port) for port in re.findall(r"listeners=\w+://[^:\s]*:(\d+)", command))
            return overridden or ports, broker
    return None


def steps_of(page: Path) -> list[Step]:
    steps = []
    default_port_taken = False
    for block in fenced_blocks(page, "sh"):
        if skip_reason(block) is not None:
            continue
        server = server_of(block)
        steps.append(Step(block.label, "server" if server else "run", block.text, ports=server[0] if server else ()))
        default_port_taken |= bool(server and server[1] and 9092 in server[0])
    if steps and not default_port_taken:
        steps.insert(0, DEFAULT_BROKER)
    return steps


PAGES = [page for page in doc_pages() if fenced_blocks(page, "sh")]


def test_every_skipped_block_and_server_still_exists() -> None:
    blocks = [block for page in doc_pages() for block in fenced_blocks(page, "sh")]
    assert [key for key in SKIPPED if not any(b.page == key[0] and key[1] in b.text for b in blocks)] == []
    assert [p for p in SERVERS if not any(re.match(p, first_command(b)) for b in blocks)] == []


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_the_page_s_commands_run(page: Path, installed_wheel: WheelVenv, tmp_path: Path) -> None:
    steps = steps_of(page)
    env = {"PATH": f"{installed_wheel.bin}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path / "home"),
           "LANG": "C.UTF-8"}
    outcomes = run_plan(Plan(steps, tmp_path / "work", env, sample_dirs()), python=str(installed_wheel.python))
    assert len(outcomes) == len(steps) and all(o.ok for o in outcomes), report(outcomes, len(steps))
