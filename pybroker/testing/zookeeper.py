"""A real ZooKeeper server (Debian's `zookeeper` package) as a child process on a free loopback port,
with its data in a given directory: what a multi-broker pybroker cluster registers in."""

from __future__ import annotations

import logging
import shutil
import socket
from pathlib import Path

from pybroker.testing.process import ChildProcess

JARS = Path("/usr/share/java")
# zookeeper.jar and what ZooKeeperServerMain loads at run time; slf4j-nop keeps it quiet.
CLASSPATH_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-nop.jar", "netty-handler.jar",
                  "netty-common.jar", "netty-transport.jar", "netty-buffer.jar", "netty-codec.jar",
                  "netty-resolver.jar", "netty-transport-native-epoll.jar",
                  "netty-transport-native-unix-common.jar", "metrics-core.jar", "commons-cli.jar")
# kazoo warns of every refused connection while the JVM starts: expected here, so only errors show.
PROBE_LOG = logging.getLogger("pybroker.testing.zookeeper.probe")
PROBE_LOG.setLevel(logging.ERROR)
PORT_ATTEMPTS = 3  # a free port picked here may be taken by a parallel test run before ZooKeeper binds it


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper (or the Java it runs on) is not installed here."""


def check_installed() -> None:
    missing = [jar for jar in CLASSPATH_JARS if not (JARS / jar).exists()]
    if missing or shutil.which("java") is None:
        what = f"{', '.join(missing)} in {JARS}" if missing else "java on PATH"
        raise ZooKeeperUnavailable(f"A pybroker cluster needs a ZooKeeper server, and {what} is missing: "
                                   "install the Debian/Ubuntu package `zookeeper` (apt-get install zookeeper).")


def _free_port() -> int:
    # ZooKeeper cannot bind port 0 itself (clientPort=0 means "unset"): pick one that is free now.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ZooKeeperServer:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.port = _free_port()
        self.child: ChildProcess | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def process(self) -> ChildProcess | None:
        """The running server's process (None when stopped)."""
        return self.child

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        check_installed()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        failure: Exception | None = None
        for _ in range(PORT_ATTEMPTS):
            try:
                self._start_once(timeout)
                return self
            except Exception as exc:  # the port was taken meanwhile, or ZooKeeper never answered
                self.stop()
                failure = exc
                self.port = _free_port()
        raise RuntimeError(f"ZooKeeper did not start in {self.data_dir}: {failure}") from failure

    def _start_once(self, timeout: float) -> None:
        from kazoo.client import KazooClient

        config = self.data_dir / "zoo.cfg"
        config.write_text(f"dataDir={self.data_dir}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
                          "tickTime=500\nadmin.enableServer=false\n")
        classpath = ":".join(str(JARS / jar) for jar in CLASSPATH_JARS)
        self.child = ChildProcess(["java", "-Xmx256m", "-cp", classpath,
                                   "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)], None)
        client = KazooClient(self.connect, logger=PROBE_LOG)
        try:
            client.start(timeout)
        finally:
            client.stop()
            client.close()
        if not self.child.alive():  # another server answered on that port
            raise RuntimeError(f"ZooKeeper exited: {self.child.tail(5)}")

    def stop(self) -> None:
        if self.child is not None:
            self.child.kill()
            self.child = None
