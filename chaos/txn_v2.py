"""The transactional workloads with transactions V2 producers (`--txn-version 2`): Apache Kafka's Java client 4.2.

librdkafka 2.16 (confluent-kafka) runs transactions V1 whatever the broker finalizes: it sends AddPartitionsToTxn
v0 and EndTxn v1 against a broker with `transaction.version=2` (measured with the brokers' request metrics), and
has no KIP-890 support yet (confluentinc/librdkafka#5423). The Java 4.2 producer runs V2 when the broker finalizes
level 2, as pybroker does by default: its Produce v12+ adds the partitions, EndTxn v5 bumps the epoch at every end,
TxnOffsetCommit v5 adds the group's offsets. TxnV2Workload.java runs the same two loops as workload.py's `t0`
(transactions of 1-4 values, 60% committed) and `x0` (consume-transform-produce with the group's offsets in each
transaction) and prints their events as JSON lines, which go to the History unchanged, so the checker is the same.

The client jars are ../shared/jvm-clients' (4.2 is unshaded: opentelemetry-proto and protobuf-java beside it) and
slf4j-api, lz4, snappy and zstd from pyspark's jars/ folder (the [spark] extra); the class is compiled once per
source version into the temporary folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from chaos.history import History

SOURCE = Path(__file__).with_name("TxnV2Workload.java")
JVM_CLIENTS = Path(__file__).resolve().parent.parent.parent / "shared" / "jvm-clients"
CLIENT_JARS = ("kafka-clients-4.2.2-SNAPSHOT-ccs-d26e8523.jar", "opentelemetry-proto-1.0.0-alpha.jar",
               "protobuf-java-3.25.5.jar")
RUNTIME_JARS = ("slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-")
LOOPS = ("t0", "x0")
STDERR_LINES = 200  # of the JVM's stderr kept in the History, for a post-mortem


def _classpath() -> list[Path]:
    spec = importlib.util.find_spec("pyspark")  # the [spark] extra: its jars/ has the client's dependencies
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("--txn-version 2 needs pyspark's jars/ folder (the [spark] extra)")
    jars_dir = Path(list(spec.submodule_search_locations)[0]) / "jars"
    runtime = [sorted(jars_dir.glob(prefix + "[0-9]*.jar"))[-1:] for prefix in RUNTIME_JARS]
    jars = [JVM_CLIENTS / name for name in CLIENT_JARS] + [jar for found in runtime for jar in found]
    missing = [str(jar) for jar in jars if not jar.exists()] + [p for p, f in zip(RUNTIME_JARS, runtime) if not f]
    if missing:
        raise RuntimeError(f"--txn-version 2 needs the Java 4.2 client and its dependencies; missing: {missing}")
    return jars


def compiled_classpath() -> str:
    """The classpath to run TxnV2Workload with, compiling it first unless this source version already is."""
    jars = _classpath()
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    classes = Path(tempfile.gettempdir()) / f"chaos-txn-v2-{digest}"
    if not (classes / "TxnV2Workload.class").exists():
        javac = shutil.which("javac")
        if javac is None:
            raise RuntimeError("--txn-version 2 needs javac (tools/install-system-deps.sh: default-jdk-headless)")
        building = Path(tempfile.mkdtemp(prefix="chaos-txn-v2-build-"))
        subprocess.run([javac, "-Xlint:all", "-Werror", "-d", str(building), "-cp", ":".join(map(str, jars)),
                        str(SOURCE)], check=True, capture_output=True, text=True, timeout=300)
        shutil.rmtree(classes, ignore_errors=True)
        building.rename(classes)  # whole, or not at all: a concurrent harness may compile it too
    return ":".join(map(str, [classes, *jars]))


class JavaTxnWorkload:
    """The JVM running the V2 transactional loops; its events go to ``history`` as they are printed."""

    def __init__(self, history: History, bootstrap: str, partitions: int, seed: int) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.seed = seed
        self.classpath = compiled_classpath()
        self.process: subprocess.Popen[str] | None = None
        self.readers: list[threading.Thread] = []

    def start(self, deadline: float) -> None:
        seconds = max(0.0, deadline - time.monotonic())
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", self.classpath, "TxnV2Workload", self.bootstrap, str(self.partitions),
             str(self.seed), f"{seconds:.1f}", *LOOPS],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.readers = [threading.Thread(target=self._events, args=(self.process.stdout,), name="java-txn",
                                         daemon=True),
                        threading.Thread(target=self._stderr, args=(self.process.stderr,), name="java-txn-stderr",
                                         daemon=True)]
        for reader in self.readers:
            reader.start()

    def _events(self, stdout: IO[str]) -> None:
        for line in stdout:
            if not line.startswith("{"):  # not one of its events: something a library printed
                self.history.add("java-stdout", process="java-txn", line=line.rstrip())
                continue
            event = json.loads(line)
            kind = event.pop("type")
            if event.get("error", "") is None:
                del event["error"]
            self.history.add(kind, **event)

    def _stderr(self, stderr: IO[str]) -> None:
        for kept, line in enumerate(stderr):
            if kept < STDERR_LINES:
                self.history.add("java-stderr", process="java-txn", line=line.rstrip())

    def stop(self, timeout: float = 60.0) -> None:
        """Close the JVM's stdin (its loops end their transaction and close), wait for it, and read its last events."""
        if self.process is None:
            return
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.history.add("java-killed", process="java-txn", after=timeout)
        for reader in self.readers:
            reader.join(10)
