"""`pybroker dump-log` on the segment files a real broker wrote for this test, cross-checked with kcat."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.integration.broker_process import BrokerProcess
from tests.integration.test_cli_console import console
from tests.integration.test_cli_topics import failed, ok, run

BATCH = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: -?\d+ lastSequence: -?\d+ "
                   r"producerId: -?\d+ producerEpoch: -?\d+ partitionLeaderEpoch: \d+ isTransactional: false "
                   r"isControl: false deleteHorizonMs: OptionalLong.empty position: (\d+) CreateTime: \d+ "
                   r"size: (\d+) magic: 2 compresscodec: (\w+) crc: \d+ isvalid: (true|false)")
RECORD = re.compile(r"\| offset: (\d+) CreateTime: \d+ keySize: (-?\d+) valueSize: (\d+) sequence: -?\d+ "
                    r"headerKeys: \[\](?: key: (\S+))? payload: (\S+)")


def dump(*args: str) -> list[str]:
    return ok(run("dump-log", *args))


def test_dump_log_prints_every_batch_record_and_index_entry(shared_broker: BrokerProcess, tmp_path: Path) -> None:
    ok(run("topics", "--bootstrap-server", shared_broker.bootstrap, "--create", "--topic", "dump-me",
           "--config", "index.interval.bytes=1"))
    singles = [f"k{i}:one-{i}" for i in range(5)]
    assert console("producer", shared_broker, "--topic", "dump-me", "--sync", "--property", "parse.key=true",
                   "--property", "key.separator=:", stdin="\n".join(singles) + "\n").returncode == 0
    assert console("producer", shared_broker, "--topic", "dump-me", "--compression-codec", "gzip",
                   stdin="many-5\nmany-6\nmany-7\n").returncode == 0
    segment = shared_broker.data_dir / "logs" / "dump-me-0" / "00000000000000000000"
    lines = dump("--files", f"{segment}.log", "--print-data-log")
    assert lines[:2] == [f"Dumping {segment}.log", "Log starting offset: 0"]
    batches = [BATCH.fullmatch(line) for line in lines if line.startswith("baseOffset")]
    assert all(batches), lines
    assert [(int(b[1]), int(b[2]), int(b[3]), b[6], b[7]) for b in batches if b] == \
        [(i, i, 1, "none", "true") for i in range(5)] + [(5, 7, 3, "gzip", "true")]
    positions = [int(b[4]) for b in batches if b]
    assert positions == [0] + [sum(int(b[5]) for b in batches[:i] if b) for i in range(1, 6)]
    records = [RECORD.fullmatch(line) for line in lines if line.startswith("|")]
    assert all(records), lines
    printed = [(int(r[1]), r[4], r[5]) for r in records if r]
    assert printed == [(i, f"k{i}", f"one-{i}") for i in range(5)] + [(i, None, f"many-{i}") for i in (5, 6, 7)]
    if shutil.which("kcat"):
        read = subprocess.run(["kcat", "-C", "-b", shared_broker.bootstrap, "-t", "dump-me", "-e", "-q",
                               "-f", "%o %s\n"], capture_output=True, text=True, timeout=60, check=True)
        assert read.stdout.splitlines() == [f"{offset} {payload}" for offset, _, payload in printed]

    batch_at = {int(b[4]): int(b[2]) for b in batches if b}  # position -> last offset
    index = dump("--files", f"{segment}.index")
    entries = [re.fullmatch(r"offset: (\d+) position: (\d+)", line) for line in index[1:]]
    assert entries and all(entries), index
    assert all(batch_at[int(e[2])] == int(e[1]) for e in entries if e)
    assert dump("--files", f"{segment}.index,{segment}.timeindex", "--verify-index-only") == \
        [f"Dumping {segment}.index", f"Dumping {segment}.timeindex"]
    times = dump("--files", f"{segment}.timeindex")
    assert all(re.fullmatch(r"timestamp: \d+ offset: \d+", line) for line in times[1:])

    damaged = tmp_path / "00000000000000000000.log"
    data = bytearray(Path(f"{segment}.log").read_bytes())
    second = batches[1]
    assert second
    data[positions[1] + int(second[5]) - 1] ^= 0xFF  # the second batch's last byte: its CRC no longer matches
    damaged.write_bytes(bytes(data) + b"\x00" * 7)
    damaged_lines = dump("--files", str(damaged))
    assert [line.endswith("isvalid: false") for line in damaged_lines if line.startswith("baseOffset")] == \
        [False, True, False, False, False, False]
    assert damaged_lines[-1] == "Found 7 invalid bytes at the end of 00000000000000000000.log"


def test_missing_file_fails_with_one_line() -> None:
    assert failed(run("dump-log", "--files", "/nonexistent/00000000000000000000.log")) == \
        "Error: /nonexistent/00000000000000000000.log does not exist or is not a file"
