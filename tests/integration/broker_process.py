"""Run the real broker as a child process on a loopback port it can be restarted on (tests/ports.py)."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.ports import restartable_port

READY = re.compile(r"listening on [^:]+:(\d+)")
REPO = Path(__file__).resolve().parents[2]
#: Kafka defaults that only make a test wait; a test of one of them passes it in its overrides.
TESTING_DEFAULTS = {
    # The coordinator's 3 s wait for more members before a new or emptied classic group's first rebalance
    # (Kafka's own integration tests set GroupInitialRebalanceDelayMsProp to 0 for the same reason).
    "group.initial.rebalance.delay.ms": "0",
    # Kafka's 50 partitions of __consumer_offsets, created at a broker's first group; its TestUtils.createBrokerConfig
    # sets 5 beside the delay above. A test of the count passes its own.
    "offsets.topic.num.partitions": "5",
}


class BrokerProcess:
    """A `pybroker serve` child; its stderr is kept in `log_lines` for assertions about its log."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, *, open_files: int | None = None):
        """``overrides`` win over TESTING_DEFAULTS; ``open_files``: the child's RLIMIT_NOFILE (soft and hard), for
        tests of running out of descriptors."""
        self.data_dir = data_dir
        self.open_files = open_files
        self.overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{restartable_port()}", "log.dirs": str(data_dir / "logs"),
                          **TESTING_DEFAULTS, **(overrides or {})}
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None
        self.log_lines: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        config = self.data_dir / "server.properties"
        config.write_text("broker.id=0\n")
        args = [sys.executable, "-m", "pybroker", "serve", str(config)]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        self.process = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                        cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                        preexec_fn=None if self.open_files is None else self._limit_open_files)
        ready = threading.Event()
        self.port = None  # set by this start's ready line only: a child that exits before it did not start

        def pump() -> None:
            assert self.process is not None and self.process.stderr is not None
            for line in self.process.stderr:
                self.log_lines.append(line.rstrip("\n"))
                match = READY.search(line)
                if match:
                    self.port = int(match.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.port is None:
            self.kill()
            raise RuntimeError("broker did not start:\n" + "\n".join(self.log_lines[-30:]))
        # Re-use the same port on restart, so clients configured with it keep working.
        self.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
        return self

    def _limit_open_files(self) -> None:
        assert self.open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int:
        """SIGKILL: an unclean shutdown."""
        return self._signal(signal.SIGKILL, 30.0)

    def _signal(self, sig: int, timeout: float) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout)
        self.process = None
        return code

    def log_text(self) -> str:
        return "\n".join(self.log_lines)

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.log_text()):
                return True
            time.sleep(0.05)
        return False
