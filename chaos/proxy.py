"""Per-link TCP proxies on 127.0.0.1: how the harness cuts the network.

`ip netns` works in this sandbox but nft/iptables are absent (and a CI machine may have neither), so
partitions are made in user space.
Every broker advertises a proxy port instead of its listener, and reaches ZooKeeper through a proxy
of its own. A proxy learns which process opened each connection (the peer port's socket inode in
/proc/net/tcp, found among the fds of the known broker pids), so one proxy per broker can cut the
link to one peer and keep the rest. A cut link freezes: existing connections stop being forwarded
and new ones are accepted and left hanging, as when packets are dropped; on heal the frozen
connections are closed (their streams are unusable) and the peers reconnect.

A proxy forwards only to its own target process: while a broker is down its port is free, and another
process of the machine may listen on it (round 9401: another process's single broker, a parallel
test's by all signs, took a killed broker's port, auto-created `queue` with one partition and
acknowledged four acks=all records at offsets 0-3 that the cluster's queue-0 already held, seen as
lost and divergent). A connection whose target port is listened on by any other process is closed,
as if the target were down; the client never learns the stranger's own address either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Callable

CLIENT = "client"  # a connection opened by no known broker process: the workload, the harness
TCP_TABLE = "/proc/net/tcp"
TCP6_TABLE = "/proc/net/tcp6"
LISTEN = "0A"  # /proc/net/tcp's state of a listening socket
# 127.0.0.1 and 0.0.0.0 as /proc/net/tcp writes them, and as /proc/net/tcp6 does (IPv4-mapped, and ::)
LOOPBACK_LISTENERS = ("0100007F", "00000000", "0000000000000000FFFF00000100007F", "0" * 32)
UNHELD = "a socket no process holds (a listener outliving its exited process until the kernel releases it)"
log = logging.getLogger(__name__)


def socket_inode(port: int, remote_port: int) -> str | None:
    """The inode of the open IPv4 socket from 127.0.0.1:`port` to 127.0.0.1:`remote_port`, if it still exists.
    Both ends are matched: the kernel gives an ephemeral port to a new connection while an earlier connection
    from that port to another address lingers in TIME_WAIT, whose line (inode 0, owned by no process) may come
    first; matched on the local port alone, a follower's fetch connection was taken for a client's and never cut."""
    local, remote = f"0100007F:{port:04X}", f"0100007F:{remote_port:04X}"
    with open(TCP_TABLE) as table:
        next(table)
        for line in table:
            fields = line.split()
            if fields[1] == local and fields[2] == remote and fields[9] != "0":
                return fields[9]
    return None


def listener_inode(port: int) -> str | None:
    """The inode of the socket listening on 127.0.0.1:`port` (or on every address), if any: in /proc/net/tcp6
    when it is an IPv6 socket, as Java's are (ZooKeeper's: ::ffff:127.0.0.1)."""
    addresses = {f"{address}:{port:04X}" for address in LOOPBACK_LISTENERS}
    for path in (TCP_TABLE, TCP6_TABLE):
        try:
            with open(path) as table:
                next(table)
                for line in table:
                    fields = line.split()
                    if fields[3] == LISTEN and fields[1] in addresses:
                        return fields[9]
        except FileNotFoundError:  # no IPv6
            continue
    return None


def holds(pid: int, inode: str) -> bool:
    """Whether process `pid` has the socket `inode` open."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    target = f"socket:[{inode}]"
    for fd in fds:
        try:
            if os.readlink(f"{fd_dir}/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def owner_of(port: int, remote_port: int, pids: dict[str, int]) -> str:
    """Which of `pids` (name -> pid) holds the client end of a loopback connection from `port` to `remote_port`."""
    inode = socket_inode(port, remote_port)
    if inode is None:
        return CLIENT
    return next((name for name, pid in pids.items() if holds(pid, inode)), CLIENT)


def stranger_on(port: int, pid: int | None) -> str | None:
    """None when process `pid` is the one listening on 127.0.0.1:`port`; otherwise who is, for the log."""
    inode = listener_inode(port)
    if inode is None:
        return "nobody (the listener closed after accepting)"
    if pid is not None and holds(pid, inode):
        return None
    holder = next((int(p) for p in os.listdir("/proc") if p.isdigit() and holds(int(p), inode)), None)
    if holder is None:
        # A killed process's listening socket outlives it until the kernel releases it (a zombie's, seen for a
        # few ms, longer on a loaded machine), still taking connections that no process reads: the target
        # going down as a rule, not a stranger (no process of the machine could answer on it).
        return UNHELD
    try:
        with open(f"/proc/{holder}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        command = "?"
    return f"pid {holder} ({command})"


@dataclass(eq=False)
class _Link:
    source: str
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class Proxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`, except for sources in `blocked`, when the process
    `target()` names (None: none running) is the one listening there."""

    def __init__(self, name: str, pids: Callable[[], dict[str, int]], target: Callable[[], int | None]):
        self.name = name
        self.pids = pids
        self.target = target
        self.strangers = 0  # connections closed because another process listened on the target port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.target_port: int | None = None
        self.blocked: set[str] = set()  # sources whose traffic is dropped; "*" = every source
        self.links: set[_Link] = set()
        self.server: asyncio.base_events.Server | None = None

    def is_blocked(self, source: str) -> bool:
        return "*" in self.blocked or source in self.blocked

    async def serve(self) -> None:
        self.server = await asyncio.start_server(self._accept, sock=self.sock)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_port = writer.get_extra_info("peername")[1]
        source = await asyncio.get_running_loop().run_in_executor(None, owner_of, peer_port, self.port, self.pids())
        link = _Link(source, writer)
        self.links.add(link)
        if self.is_blocked(source) or self.target_port is None:
            return  # left hanging until heal() closes it
        loop = asyncio.get_running_loop()
        port = self.target_port
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5.0)
        except (OSError, asyncio.TimeoutError):
            self._drop(link)
            return
        link.upstream = up_writer
        # Checked once connected: the target cannot take the port back while the stranger listens on it.
        pid = self.target()
        stranger = await loop.run_in_executor(None, stranger_on, port, pid)
        if stranger == UNHELD:
            log.info("proxy %s: port %d is listened on by %s (pid %s): connection closed", self.name, port, stranger,
                     pid)
            self._drop(link)
            return
        if stranger is not None:
            self.strangers += 1
            log.warning("proxy %s: port %d is listened on by %s, not by its target (pid %s): connection closed",
                        self.name, port, stranger, pid)
            self._drop(link)
            return
        if self.is_blocked(source):  # cut while connecting
            return
        link.tasks = [loop.create_task(self._pump(link, reader, up_writer)),
                      loop.create_task(self._pump(link, up_reader, writer))]

    async def _pump(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            return
        if not self.is_blocked(link.source):
            self._drop(link)

    def _drop(self, link: _Link) -> None:
        link.close()
        self.links.discard(link)

    def block(self, sources: set[str]) -> None:
        """Cut exactly `sources`: connections from a newly cut source freeze (pumps stop; sockets stay open)
        and new ones hang; frozen connections of a source no longer cut are closed so their peers reconnect."""
        before = self.blocked
        self.blocked = set(sources)
        for link in list(self.links):
            if self.is_blocked(link.source):
                for task in link.tasks:
                    task.cancel()
                link.tasks = []
            elif "*" in before or link.source in before:
                self._drop(link)

    def reset(self) -> None:
        """Close every connection (the target restarted)."""
        for link in list(self.links):
            self._drop(link)

    def close(self) -> None:
        self.reset()
        if self.server is not None:
            self.server.close()


class ProxyHost:
    """The proxies' event loop, on a thread of its own; every call is made thread-safe."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="chaos-proxies", daemon=True)
        self.thread.start()
        self.proxies: list[Proxy] = []

    def add(self, proxy: Proxy) -> Proxy:
        asyncio.run_coroutine_threadsafe(proxy.serve(), self.loop).result(10)
        self.proxies.append(proxy)
        return proxy

    def call(self, fn: Callable[[], None]) -> None:
        async def run() -> None:
            fn()
        asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def close(self) -> None:
        for proxy in self.proxies:
            self.call(proxy.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
