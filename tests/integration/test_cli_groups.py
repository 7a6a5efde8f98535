"""`pybroker consumer-groups` against a real broker, with groups made by our console consumer and by
confluent-kafka (a real client as the active member)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from tests.eventually import eventually
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.test_cli_console import console, consumed
from tests.integration.test_cli_topics import failed, ok, run

OFFSETS_HEADER = re.compile(r"GROUP +TOPIC +PARTITION +CURRENT-OFFSET +LOG-END-OFFSET +LAG +CONSUMER-ID +HOST +"
                            r"CLIENT-ID")


def groups(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run("consumer-groups", "--bootstrap-server", broker.bootstrap, *args)


def offset_rows(result: subprocess.CompletedProcess[str]) -> dict[int, tuple[str, ...]]:
    """partition -> (current, log-end, lag, consumer id) of a `--describe` offsets table."""
    assert result.returncode == 0, result
    lines = [line for line in result.stdout.splitlines() if line]
    assert OFFSETS_HEADER.fullmatch(lines[0].rstrip()), lines
    rows = {}
    for line in lines[1:]:
        _, _, partition, current, log_end, lag, consumer, *_ = line.split()
        rows[int(partition)] = (current, log_end, lag, consumer)
    return rows


def new_offsets(result: subprocess.CompletedProcess[str]) -> dict[int, int]:
    """partition -> NEW-OFFSET of a `--reset-offsets` table (warnings may come on stderr)."""
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[:2] == ["", "GROUP                          TOPIC                          PARTITION  NEW-OFFSET     "]
    return {int(line.split()[2]): int(line.split()[3]) for line in lines[2:] if line}


def produce(broker: BrokerProcess, topic: str, per_partition: dict[int, int]) -> None:
    ok(run("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic, "--partitions",
           str(len(per_partition))))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, value=f"{partition}-{i}", partition=partition)
    assert producer.flush(30) == 0


def test_describe_shows_the_lag_after_a_consumer_commits(shared_broker: BrokerProcess) -> None:
    produce(shared_broker, "groups-lag", {0: 6, 1: 4})
    consumed(console("consumer", shared_broker, "--topic", "groups-lag", "--group", "lagging", "--from-beginning",
                     "--max-messages", "7"), 7)
    described = groups(shared_broker, "--describe", "--group", "lagging")
    assert "Consumer group 'lagging' has no active members." in described.stderr
    rows = offset_rows(described)
    assert sorted(rows) == [0, 1]
    assert [rows[p][1] for p in (0, 1)] == ["6", "4"]
    assert sum(int(rows[p][0]) for p in rows) == 7
    assert all(int(log_end) - int(current) == int(lag) and consumer == "-"
               for current, log_end, lag, consumer in rows.values())
    assert "lagging" in ok(groups(shared_broker, "--list"))


def test_reset_offsets_moves_a_group_that_then_consumes_from_there(shared_broker: BrokerProcess) -> None:
    produce(shared_broker, "groups-reset", {0: 5, 1: 3})
    consumed(console("consumer", shared_broker, "--topic", "groups-reset", "--group", "resetting", "--from-beginning",
                     "--max-messages", "8"), 8)
    scope = ("--reset-offsets", "--group", "resetting", "--topic", "groups-reset")
    assert new_offsets(groups(shared_broker, *scope, "--to-earliest", "--dry-run")) == {0: 0, 1: 0}
    assert {p: row[0] for p, row in offset_rows(groups(shared_broker, "--describe", "--group", "resetting")).items()} \
        == {0: "5", 1: "3"}  # a dry run changes nothing
    assert new_offsets(groups(shared_broker, *scope, "--to-earliest", "--execute")) == {0: 0, 1: 0}
    assert len(consumed(console("consumer", shared_broker, "--topic", "groups-reset", "--group", "resetting",
                                "--timeout-ms", "1500"), 8)) == 8
    shifted = groups(shared_broker, "--reset-offsets", "--group", "resetting", "--topic", "groups-reset:0",
                     "--shift-by", "-2", "--execute")
    assert new_offsets(shifted) == {0: 3}
    assert consumed(console("consumer", shared_broker, "--topic", "groups-reset", "--group", "resetting",
                            "--timeout-ms", "1500"), 2) == ["0-3", "0-4"]
    clamped = groups(shared_broker, *scope, "--to-offset", "100", "--dry-run")
    assert new_offsets(clamped) == {0: 5, 1: 3}
    assert "Value will be set to 5" in clamped.stderr
    future = time.strftime("%Y-%m-%dT%H:%M:%S.000", time.localtime(time.time() + 3600))
    assert new_offsets(groups(shared_broker, *scope, "--to-datetime", future, "--dry-run")) == {0: 5, 1: 3}
    assert new_offsets(groups(shared_broker, *scope, "--by-duration", "PT1H", "--dry-run")) == {0: 0, 1: 0}
    assert "exactly one of these options" in failed(groups(shared_broker, *scope, "--to-earliest", "--to-latest"))


def on_terminal(*args: str) -> tuple[str, str]:
    """(stdout, what a terminal on stderr showed) of a tool whose stderr is a pseudo-terminal."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "pybroker", *args], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=terminal, cwd=REPO)
        os.close(terminal)
        shown = b""
        while chunk := _read_terminal(controller):
            shown += chunk
        stdout, _ = process.communicate(timeout=30)
    finally:
        os.close(controller)
    assert process.returncode == 0, shown
    return stdout.decode(), shown.decode()


def _read_terminal(controller: int) -> bytes:
    try:
        return os.read(controller, 4096)
    except OSError:  # EIO: the tool exited and closed its end of the terminal
        return b""


def test_reset_offsets_shows_progress_on_a_terminal_only(shared_broker: BrokerProcess) -> None:
    produce(shared_broker, "groups-progress", {0: 2, 1: 1})
    scope = ("consumer-groups", "--bootstrap-server", shared_broker.bootstrap, "--reset-offsets", "--group",
             "progress", "--topic", "groups-progress")
    stdout, shown = on_terminal(*scope, "--to-latest", "--execute")
    assert "Resolving new offsets of group 'progress': 2/2 partitions (100%)\r\n" in shown
    assert new_offsets(subprocess.CompletedProcess([], 0, stdout, "")) == {0: 2, 1: 1}
    scripted = run(*scope, "--to-earliest", "--execute")
    assert (new_offsets(scripted), scripted.stderr) == ({0: 0, 1: 0}, "")


def test_active_member_state_and_refusals(shared_broker: BrokerProcess, tmp_path: Path) -> None:
    produce(shared_broker, "groups-live", {0: 1, 1: 1})
    member = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "live", "client.id": "live-client",
                       "auto.offset.reset": "earliest"})
    try:
        member.subscribe(["groups-live"])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        members = ok(groups(shared_broker, "--describe", "--group", "live", "--members", "--verbose"))
        assert members[1].split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                                      "#PARTITIONS", "ASSIGNMENT"]
        group, _, instance, _, client, count, assignment = members[2].split()
        assert (group, instance, client, count, assignment) == ("live", "-", "live-client", "2", "groups-live(0,1)")
        state = ok(groups(shared_broker, "--describe", "--group", "live", "--state"))
        assert state[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert state[2].split() == ["live", shared_broker.bootstrap, "(0)", "range", "Stable", "1"]
        assert failed(groups(shared_broker, "--reset-offsets", "--group", "live", "--all-topics", "--to-latest",
                             "--execute")) == ("Error: Assignments can only be reset if the group 'live' is inactive, "
                                               "but the current state is Stable.")
        assert "The group is not empty." in failed(groups(shared_broker, "--delete", "--group", "live"))
    finally:
        member.close()
    assert ok(groups(shared_broker, "--delete", "--group", "live")) == \
        ["Deletion of requested consumer groups ('live') was successful."]
    assert "live" not in ok(groups(shared_broker, "--list"))
    assert failed(groups(shared_broker, "--describe", "--group", "live")) == "Error: Consumer group 'live' does not exist."


def test_two_console_consumers_in_one_group_split_the_partitions(shared_broker: BrokerProcess) -> None:
    produce(shared_broker, "groups-pair", {0: 0, 1: 0})
    command = [sys.executable, "-m", "pybroker", "console-consumer", "--bootstrap-server", shared_broker.bootstrap,
               "--topic", "groups-pair", "--group", "pair", "--max-messages", "3", "--property", "print.partition=true"]
    members = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
               for _ in range(2)]
    try:
        def one_partition_each() -> bool:
            described = groups(shared_broker, "--describe", "--group", "pair", "--members")
            return [line.split()[-1] for line in described.stdout.splitlines()[2:] if line.strip()] == ["1", "1"]

        eventually(one_partition_each, "one partition for each of the two members", interval=0.2)
        producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
        for i in range(6):
            producer.produce("groups-pair", value=f"v{i}", partition=i % 2)
        assert producer.flush(30) == 0
        outputs = [member.communicate(timeout=60) for member in members]
    finally:
        for member in members:
            member.kill()
    partitions = sorted(",".join(sorted({line.split("\t")[0] for line in out.splitlines()})) for out, _ in outputs)
    assert partitions == ["Partition:0", "Partition:1"]  # each member printed exactly one partition
    assert all(err.splitlines()[-1] == "Processed a total of 3 messages" for _, err in outputs)
