"""Page load times of `pybroker console` on a cluster with 1,000 topics and 100 consumer groups.

Starts a broker (as tests/integration does) and a console, fills the cluster over the wire, then times
each page's HTTP response (server-rendered, so this is what a browser waits for before drawing):
    .venv/bin/python tools/console_load_times.py [--topics 1000] [--groups 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pybroker.client import AdminClient, KafkaClient, NewTopic, Producer  # noqa: E402
from pybroker.client.groups import GroupAdmin  # noqa: E402
from pybroker.common.topic import TopicPartition  # noqa: E402
from pybroker.records import RecordInput  # noqa: E402
from tests.console.conftest import ConsoleProcess  # noqa: E402
from tests.integration.broker_process import BrokerProcess  # noqa: E402

CREATE_BATCH = 100


async def fill(bootstrap: str, topics: int, groups: int) -> None:
    async with KafkaClient(bootstrap, timeout=120) as client:
        admin = AdminClient(client)
        names = [f"topic-{i:04d}" for i in range(topics)]
        for start in range(0, topics, CREATE_BATCH):
            for result in (await admin.create_topics([NewTopic(n, 1, 1) for n in names[start:start + CREATE_BATCH]])
                           ).values():
                result.raise_error()
        producer = Producer(client)
        await producer.send({TopicPartition(n, 0): [RecordInput(b"k", b'{"n": %d}' % i) for i in range(10)]
                             for n in names})
        group_admin = GroupAdmin(client)
        for g in range(groups):
            await group_admin.commit_offsets(f"group-{g:03d}", {TopicPartition(names[(g * 10 + k) % topics], 0): 5
                                                                 for k in range(10)})


def timed(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as response:
        response.read()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        broker = BrokerProcess(Path(data)).start()
        console = None
        try:
            began = time.perf_counter()
            asyncio.run(fill(broker.bootstrap, args.topics, args.groups))
            print(f"filled {args.topics} topics and {args.groups} groups in {time.perf_counter() - began:.1f} s")
            console = ConsoleProcess(["--bootstrap-server", broker.bootstrap]).wait_ready()
            pages = ["/", "/topics", "/topics?q=topic-05", "/topics/topic-0001", "/topics/topic-0001/messages",
                     "/groups", "/groups/group-001", "/charts", "/acls"]
            timed(console.url + "/")  # first connection to the cluster
            for page in pages:
                times = [timed(console.url + page) for _ in range(args.rounds)]
                print(f"{page:32} median {statistics.median(times) * 1000:8.0f} ms  "
                      f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})")
        finally:
            if console is not None:
                console.stop()
            broker.kill()


if __name__ == "__main__":
    main()
