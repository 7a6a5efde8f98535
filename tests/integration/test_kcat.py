"""kcat (librdkafka's command-line client) against the real broker."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.messages import CODECS, PARTITIONS
from tests.integration.test_confluent_kafka import create_topic

COUNT = 10_000


def kcat(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_every_codec(shared_broker, codec):
    topic = f"kcat-{codec}"
    create_topic(shared_broker.bootstrap, topic)
    lines = "".join(f"key-{i % 50}:value-{i}\n" for i in range(COUNT))
    kcat("-P", "-b", shared_broker.bootstrap, "-t", topic, "-K", ":", "-z", codec, "-H", f"codec={codec}",
         "-X", "partitioner=murmur2_random", stdin=lines)
    out = kcat("-C", "-b", shared_broker.bootstrap, "-t", topic, "-e", "-q", "-f", "%p|%o|%k|%s|%h|%T\n")
    rows = [line.split("|") for line in out.splitlines()]
    assert len(rows) == COUNT
    seen = set()
    last_value_index: dict[str, int] = {}
    partitions = set()
    for partition, _offset, key, value, headers, timestamp in rows:
        index = int(value.split("-")[1])
        assert key == f"key-{index % 50}"
        assert headers == f"codec={codec}"
        assert int(timestamp) > 0
        # Within a key (one partition), values arrive in the order they were produced.
        assert index > last_value_index.get(key, -1)
        last_value_index[key] = index
        seen.add(index)
        partitions.add(int(partition))
    assert seen == set(range(COUNT))
    assert partitions == set(range(PARTITIONS))
