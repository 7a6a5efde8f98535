"""A Spark 4.0 session with Spark's JVM Kafka connector, in its own process, driven by the tests.

The connector jars in ../shared/jvm-clients are built for Spark 4.0.x (SOURCE.md there), while the main venv has
the newer pyspark the Python fallback needs; so `make test` keeps a second venv, .venv-spark40, and the tests run
`tests/spark/operations.py` in it through this module: one pickled (operation, arguments) per line on stdin, one
pickled result per line on stdout. Run as `python -m tests.spark.remote` it is that child process.
"""

from __future__ import annotations

import argparse
import base64
import os
import pickle
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

from pybroker.spark_jobs.common import build_session
from tests.spark.operations import OPERATIONS

REPO = Path(__file__).resolve().parents[2]
JARS_DIR = REPO.parent / "shared" / "jvm-clients"
JARS = ("spark-sql-kafka-0-10_2.13-4.0.0.jar", "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
        "commons-pool2-2.12.0.jar", "kafka-clients-3.9.1.jar")
VENV = REPO / ".venv-spark40"
ANSWER = b"@@answer "
CALL_TIMEOUT_S = 600.0


def jars_argument() -> str:
    return ",".join(str(JARS_DIR / jar) for jar in JARS)


def spark40_environment() -> dict[str, str]:
    """Environment of a Spark 4.0 process that must use the JVM connector (SPARK_JOBS_KAFKA_CONNECTOR=jvm)."""
    python = str(VENV / "bin" / "python")
    return {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
            "SPARK_JOBS_KAFKA_CONNECTOR": "jvm",
            "PYSPARK_SUBMIT_ARGS": f"--jars {jars_argument()} --conf spark.ui.enabled=false pyspark-shell"}


class RemoteSpark:
    """The client side: `call(operation, *args)` runs `OPERATIONS[operation](spark, *args)` in the child's session."""

    def __init__(self, log_path: Path):
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen([str(VENV / "bin" / "python"), "-m", "tests.spark.remote"], cwd=REPO,
                                        env=spark40_environment(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._log)
        self._answers: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        assert self.process.stdin is not None
        self.process.stdin.write(base64.b64encode(pickle.dumps((operation, args, kwargs))) + b"\n")
        self.process.stdin.flush()
        try:
            line = self._answers.get(timeout=CALL_TIMEOUT_S)
        except queue.Empty:
            raise TimeoutError(f"{operation} took over {CALL_TIMEOUT_S:.0f} s; log in {self.log_path}") from None
        if line is None:
            raise RuntimeError(f"the Spark 4.0 process exited; its log:\n{self.log_tail()}")
        ok, result = pickle.loads(base64.b64decode(line))
        if not ok:
            raise RuntimeError(f"{operation} failed in the Spark 4.0 process: {result}")
        return result

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
        self._log.close()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(ANSWER):
                self._answers.put(line[len(ANSWER):].strip())
        self._answers.put(None)


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """The child: one session for every request, until stdin closes."""
    spark = build_session("pybroker-spark40-tests", argparse.Namespace(master="local[2]", shuffle_partitions=2))
    spark.sparkContext.setLogLevel("ERROR")
    for line in requests:
        operation, args, kwargs = pickle.loads(base64.b64decode(line))
        try:
            answer = (True, OPERATIONS[operation](spark, *args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the test that asked
            answer = (False, f"{type(exc).__name__}: {exc}")
        answers.write(ANSWER + base64.b64encode(pickle.dumps(answer)) + b"\n")
        answers.flush()
    spark.stop()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
