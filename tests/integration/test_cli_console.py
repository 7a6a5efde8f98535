"""`pybroker console-producer` and `console-consumer` as a user runs them, against a real broker.

The round trip is cross-checked with kcat (it reads what the console producer wrote) and with
kafka-python's murmur2 (keys land on the partitions Java's producer would choose).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from kafka.partitioner.default import murmur2

from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.test_cli_topics import failed, ok, run


def console(tool: str, broker: BrokerProcess, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", f"console-{tool}", "--bootstrap-server",
                           broker.bootstrap, *args], input=stdin, capture_output=True, text=True, cwd=REPO,
                          timeout=60)


def consumed(result: subprocess.CompletedProcess[str], count: int) -> list[str]:
    """stdout lines of a console consumer run that ended normally after ``count`` records."""
    assert result.returncode == 0, result
    assert result.stderr.splitlines()[-1] == f"Processed a total of {count} messages", result.stderr
    return result.stdout.splitlines()


def test_round_trip_of_1000_keyed_lines(shared_broker: BrokerProcess) -> None:
    ok(run("topics", "--bootstrap-server", shared_broker.bootstrap, "--create", "--topic", "console-keyed",
           "--partitions", "3"))
    lines = [f"key-{i % 50}:value-{i}" for i in range(1000)]
    produced = console("producer", shared_broker, "--topic", "console-keyed", "--property", "parse.key=true",
                       "--property", "key.separator=:", "--compression-codec", "lz4", stdin="\n".join(lines) + "\n")
    assert (produced.returncode, produced.stdout, produced.stderr) == (0, "", "")
    result = console("consumer", shared_broker, "--topic", "console-keyed", "--from-beginning",
                     "--max-messages", "1000", "--property", "print.key=true", "--property", "print.partition=true",
                     "--property", "key.separator=:")
    printed = [line.split(":", 3) for line in consumed(result, 1000)]
    assert sorted((key, value) for _, _, key, value in printed) == sorted(tuple(line.split(":")) for line in lines)
    for _, partition, key, _ in printed:
        assert int(partition) == (murmur2(key.encode()) & 0x7FFFFFFF) % 3
    for partition in "012":  # each partition in production order
        values = [int(value.split("-")[1]) for _, p, _, value in printed if p == partition]
        assert values == sorted(values)
    if shutil.which("kcat"):
        read = subprocess.run(["kcat", "-C", "-b", shared_broker.bootstrap, "-t", "console-keyed", "-e", "-q",
                               "-f", "%k:%s\n"], capture_output=True, text=True, timeout=60, check=True)
        assert sorted(read.stdout.splitlines()) == sorted(lines)


def test_partition_offset_headers_and_timeout(shared_broker: BrokerProcess) -> None:
    ok(run("topics", "--bootstrap-server", shared_broker.bootstrap, "--create", "--topic", "console-part",
           "--partitions", "2"))
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(4):
        producer.produce("console-part", key=f"k{i}", value=f"v{i}", partition=1, headers=[("h", f"x{i}".encode())])
    assert producer.flush(30) == 0
    result = console("consumer", shared_broker, "--topic", "console-part", "--partition", "1", "--offset", "2",
                     "--max-messages", "2", "--property", "print.offset=true", "--property", "print.headers=true",
                     "--property", "print.key=true")
    assert consumed(result, 2) == ["Offset:2\th:x2\tk2\tv2", "Offset:3\th:x3\tk3\tv3"]
    idle = console("consumer", shared_broker, "--topic", "console-part", "--partition", "0", "--timeout-ms", "300")
    assert consumed(idle, 0) == []
    assert "TimeoutException" in idle.stderr


def test_acks_zero_gzip_and_headers_from_lines(shared_broker: BrokerProcess) -> None:
    produced = console("producer", shared_broker, "--topic", "console-acks0", "--request-required-acks", "0",
                       "--compression-codec", "--sync", "--property", "parse.headers=true",
                       stdin="a:1,b:2\tfirst\n\tsecond\n")
    assert (produced.returncode, produced.stderr) == (0, "")
    result = console("consumer", shared_broker, "--topic", "console-acks0", "--from-beginning", "--max-messages",
                     "2", "--property", "print.headers=true")
    assert consumed(result, 2) == ["a:1,b:2\tfirst", "NO_HEADERS\tsecond"]


def test_bad_input_exits_1_with_one_line(shared_broker: BrokerProcess) -> None:
    bad_line = console("producer", shared_broker, "--topic", "console-bad", "--property", "parse.key=true",
                       stdin="k\tv\nnokey\n")
    assert bad_line.returncode == 1
    assert bad_line.stderr.splitlines() == ["ERROR No key separator found on line number 2: 'nokey'"]
    assert "Unknown compression codec" in failed(console("producer", shared_broker, "--topic", "t",
                                                         "--compression-codec", "brotli", stdin=""))
    assert "acks" in failed(console("producer", shared_broker, "--topic", "t", "--request-required-acks", "2",
                                    stdin=""))
    result = console("consumer", shared_broker, "--topic", "t", "--offset", "3")
    assert result.returncode == 1
    assert "The partition is required when offset is specified." in result.stderr.splitlines()[0]


@pytest.mark.parametrize("tool", ["console-producer", "console-consumer", "consumer-groups", "configs", "dump-log"])
def test_every_new_tool_has_help(tool: str) -> None:
    result = run(tool, "--help")
    assert result.returncode == 0 and f"usage: pybroker {tool}" in result.stdout
