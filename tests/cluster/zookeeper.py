"""A real ZooKeeper server (Debian's `zookeeper` package, tools/install-system-deps.sh) as a child
process on a free loopback port, with its data in a temporary directory."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from kazoo.client import KazooClient

JARS = Path("/usr/share/java")
# zookeeper.jar and what ZooKeeperServerMain loads at run time; slf4j-nop keeps it quiet.
CLASSPATH_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-nop.jar", "netty-handler.jar",
                  "netty-common.jar", "netty-transport.jar", "netty-buffer.jar", "netty-codec.jar",
                  "netty-resolver.jar", "netty-transport-native-epoll.jar",
                  "netty-transport-native-unix-common.jar", "metrics-core.jar", "commons-cli.jar")


def _free_port() -> int:
    # ZooKeeper cannot bind port 0 itself (clientPort=0 means "unset"): pick one that is free now.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ZooKeeperServer:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text(f"dataDir={self.data_dir}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
                          "tickTime=500\nadmin.enableServer=false\n")
        classpath = ":".join(str(JARS / jar) for jar in CLASSPATH_JARS)
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = KazooClient(self.connect)
        try:
            client.start(timeout)
        except Exception:
            self.stop()
            raise
        finally:
            client.stop()
            client.close()
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(30)
            self.process = None

