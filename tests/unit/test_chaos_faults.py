"""Fault schedules: the sequential generator still draws the schedules the smoke's seeds name; the
overlapping one overlaps faults but never two power losses, nor anything with an exclusive fault; a
proxy cuts exactly the sources it is told and lets their frozen connections go when released, and tells a
broker's connection from a client's although its port lingers in TIME_WAIT from an earlier connection, and
forwards only to its own target process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from chaos.faults import COMPOSITE, SHARE_KINDS, SPECS, Fault, schedule
from chaos import proxy as proxy_module
from chaos.proxy import CLIENT, Proxy, ProxyHost, owner_of
from tests.eventually import eventually
from tests.ports import restartable_port


def test_the_sequential_schedule_of_seed_6_is_kill_two_then_power_loss_of_a_leader() -> None:
    assert schedule(6, 20.0) == [Fault(3.6, "kill-two", "random", 2.0), Fault(8.7, "power-loss", "leader", 2.3)]


def test_overlapping_schedules_overlap_but_never_two_power_losses_or_an_exclusive_fault() -> None:
    overlaps = 0
    for seed in range(200):
        plan = schedule(seed, 60.0, generator="overlapping", partitions=6)
        assert plan and all(f.end() <= 57.0 for f in plan)
        for i, a in enumerate(plan):
            assert (a.partition is not None) == (a.target in ("leader", "preferred"))
            for b in plan[i + 1:]:
                if b.at < a.end():
                    overlaps += 1
                    assert not (SPECS[a.kind].power_loss and SPECS[b.kind].power_loss), (seed, a, b)
                    assert not (SPECS[a.kind].exclusive or SPECS[b.kind].exclusive), (seed, a, b)
    assert overlaps > 200


def test_aimed_schedules_draw_only_composite_faults_one_after_another() -> None:
    plan = schedule(11, 60.0, generator="aimed", partitions=6)
    assert plan and {f.kind for f in plan} <= set(COMPOSITE)
    assert all(b.at >= a.end() for a, b in zip(plan, plan[1:]))
    only = schedule(11, 60.0, ["lag-then-kill"], generator="aimed", partitions=6)
    assert only and {f.kind for f in only} == {"lag-then-kill"}


def test_share_only_faults_are_drawn_only_for_rounds_with_the_share_workload() -> None:
    """A round without the share workload has no share-partition to stall: its schedules are the ones its seeds
    drew before the share faults existed; a share round's defaults include them."""
    drawn = {f.kind for seed in range(50) for f in schedule(seed, 60.0, generator="overlapping", partitions=6)}
    assert drawn and not drawn & set(SHARE_KINDS)
    shared = {f.kind for seed in range(50)
              for f in schedule(seed, 60.0, generator="overlapping", partitions=6, share=True)}
    assert set(SHARE_KINDS) <= shared
    with pytest.raises(ValueError, match="share workload"):
        schedule(11, 60.0, list(SHARE_KINDS), generator="aimed", partitions=6)


def _echo_server(family: socket.AddressFamily = socket.AF_INET) -> tuple[socket.socket, int]:
    """An echo server in this process on 127.0.0.1; with AF_INET6, on ::ffff:127.0.0.1, as Java's servers."""
    server = socket.socket(family)
    server.bind(("127.0.0.1" if family == socket.AF_INET else "::ffff:127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(1024), b"")],
                             daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_a_proxy_freezes_a_cut_source_and_closes_its_connections_once_released() -> None:
    server, port = _echo_server()
    host = ProxyHost()
    try:
        proxy = host.add(Proxy("b0", lambda: {}, os.getpid))  # the echo server is ours
        proxy.target_port = port
        client = socket.create_connection(("127.0.0.1", proxy.port), 5)
        client.settimeout(5)
        client.sendall(b"ping")
        assert client.recv(4) == b"ping"
        host.call(lambda: proxy.block({"b1"}))  # another source: this client is not affected
        client.sendall(b"pong")
        assert client.recv(4) == b"pong"
        host.call(lambda: proxy.block({CLIENT}))
        client.settimeout(0.5)
        client.sendall(b"lost")
        with pytest.raises(TimeoutError):  # frozen: nothing forwarded, nothing closed
            client.recv(4)
        host.call(lambda: proxy.block(set()))
        client.settimeout(5)
        assert client.recv(4) == b""  # released: the frozen connection is closed, the peer reconnects
        again = socket.create_connection(("127.0.0.1", proxy.port), 5)
        again.settimeout(5)
        again.sendall(b"back")
        assert again.recv(4) == b"back"
    finally:
        host.close()
        server.close()


def test_a_proxy_closes_a_connection_when_another_process_listens_on_its_target_port() -> None:
    """Round 9401: while a broker was down, a parallel test's broker listened on its port and acknowledged the
    workload's records. Here the echo server is the stranger: this process listens, the target is another."""
    server, port = _echo_server()
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    target: list[int | None] = [other.pid]
    host = ProxyHost()
    try:
        proxy = host.add(Proxy("b0", lambda: {}, lambda: target[0]))
        proxy.target_port = port
        for pid in (other.pid, None):  # the target runs (it may be starting) or is down
            target[0] = pid
            client = socket.create_connection(("127.0.0.1", proxy.port), 5)
            client.settimeout(5)
            client.sendall(b"ping")
            assert client.recv(4) == b"", f"forwarded to a stranger while the target was {pid}"
            client.close()
        assert proxy.strangers == 2
        target[0] = os.getpid()  # the listener is the target: forwarded
        client = socket.create_connection(("127.0.0.1", proxy.port), 5)
        client.settimeout(5)
        client.sendall(b"ping")
        assert client.recv(4) == b"ping"
        client.close()
    finally:
        host.close()
        server.close()
        other.communicate()


def test_a_listener_no_process_holds_is_a_target_going_down_not_a_stranger(monkeypatch) -> None:
    """A killed broker's listening socket outlives its process for a moment (a zombie's, longer on a loaded
    machine) and still takes connections: the proxy closes them, as for a stranger, but no stranger is counted
    or warned about (the every-seed mutant run of 2026-11-30 logged 37 such "process that is gone" warnings)."""
    server, port = _echo_server()
    monkeypatch.setattr(proxy_module, "listener_inode", lambda _port: "4294967295")  # an inode nobody holds
    assert proxy_module.stranger_on(port, os.getpid()) == proxy_module.UNHELD
    try:
        assert _ping_through_a_proxy("b0", port) == (b"", 0)
    finally:
        server.close()


def test_a_proxy_forwards_to_its_target_listening_on_an_ipv6_socket_as_zookeeper_does() -> None:
    """Java listens on ::ffff:127.0.0.1, found in /proc/net/tcp6: the first proxies that checked only
    /proc/net/tcp refused every connection to ZooKeeper."""
    server, port = _echo_server(socket.AF_INET6)
    try:
        assert _ping_through_a_proxy("zk<-b0", port) == (b"ping", 0)
    finally:
        server.close()


def _ping_through_a_proxy(name: str, port: int) -> tuple[bytes, int]:
    """"ping" sent through a proxy of this process's to ``port``: what came back, and the strangers it counted."""
    host = ProxyHost()
    try:
        proxy = host.add(Proxy(name, lambda: {}, os.getpid))
        proxy.target_port = port
        client = socket.create_connection(("127.0.0.1", proxy.port), 5)
        client.settimeout(5)
        client.sendall(b"ping")
        answer = client.recv(4)
        client.close()
        return answer, proxy.strangers
    finally:
        host.close()


def test_a_power_loss_is_risky_only_when_no_other_isr_member_holds_the_records(tmp_path, monkeypatch) -> None:
    """Kafka loses acknowledged records when every in-sync copy loses power (nothing is fsynced before the
    acknowledgement), so the nemesis powers brokers off only when another ISR member holds each partition's
    records, or a sole member had SOLE_MEMBER_GRACE_S to flush its log."""
    import time

    from chaos.cluster import SOLE_MEMBER_GRACE_S, ChaosCluster

    cluster = ChaosCluster(tmp_path)
    brokers = [type("B", (), {"broker_id": i, "alive": True, "paused": False})() for i in range(3)]
    cluster.brokers = brokers  # type: ignore[assignment]
    now = time.time()
    states: dict[str, tuple[list[int], float, bool]] = {}
    registered = {0: now - 100, 1: now - 100, 2: now - 100}
    monkeypatch.setattr(cluster, "isrs", lambda: (states, registered))
    states["queue-0"] = ([0, 1], now - 1, False)
    assert cluster.power_loss_risk([brokers[0]]) is None  # broker 1 holds it
    assert cluster.power_loss_risk([brokers[0], brokers[1]]) is not None  # both copies
    states["queue-0"] = ([0], now - 1, False)
    assert "queue-0" in cluster.power_loss_risk([brokers[0]])  # alone for a second: maybe not flushed yet
    states["queue-0"] = ([0], now - SOLE_MEMBER_GRACE_S - 1, False)
    assert cluster.power_loss_risk([brokers[0]]) is None  # it has flushed by now (the rule under test)
    cluster.killed_at[0] = now - 3  # but not if it was killed and started again since (round 3017)
    assert cluster.power_loss_risk([brokers[0]]) is not None
    del cluster.killed_at[0]
    registered[0] = now - 2  # nor if its registration is newer than the ISR
    assert cluster.power_loss_risk([brokers[0]]) is not None
    registered[0] = now - 100
    states["queue-0"] = ([0, 1], now - 1, False)
    cluster.killed_at[1] = now - 9  # broker 1 lost power; the ISR was rewritten
    assert cluster.power_loss_risk([brokers[0]]) is not None  # since, but it is not back
    registered[1] = now - 5  # back, and the ISR written after it registered again: it rejoined
    assert cluster.power_loss_risk([brokers[0]]) is None
    states["queue-0"] = ([0, 1], now - 6, False)  # written before it came back: a stale membership
    assert cluster.power_loss_risk([brokers[0]]) is not None
    del cluster.killed_at[1]
    states["queue-0"] = ([0, 1], now - 1, False)
    brokers[1].alive = False  # killed: its disk is intact, but it leaves the ISR when it comes back
    assert cluster.power_loss_risk([brokers[0]]) is not None
    brokers[1].alive = True  # started again (round 3015): the registration is still the dead process's
    cluster.killed_at[1] = now - 3
    assert cluster.power_loss_risk([brokers[0]]) is not None
    registered[1] = now - 2  # registered again, and the ISR written since: it rejoined
    assert cluster.power_loss_risk([brokers[0]]) is None


def test_the_heal_starts_again_a_broker_that_exited_after_it_looked(tmp_path) -> None:
    """Round 3004: a broker started while cut from ZooKeeper exits after its connection timeout, which may
    come just after the heal restarted the dead ones; the wait for the full ISR starts it again."""
    import threading

    from chaos.cluster import ChaosCluster

    class FakeBroker:
        def __init__(self, broker_id: int, alive: bool) -> None:
            self.broker_id, self.alive, self.process, self.spawned = broker_id, alive, object(), 0

        def spawn(self) -> None:
            self.spawned += 1
            self.alive = True

    cluster = ChaosCluster(tmp_path)
    brokers = [FakeBroker(0, True), FakeBroker(1, False), FakeBroker(2, False)]
    cluster.brokers = brokers  # type: ignore[assignment]
    cluster._broker_locks = {b.broker_id: threading.RLock() for b in brokers}
    cluster._down[2] = 1  # a fault still holds it down
    assert cluster.revive() == [1]
    assert [b.spawned for b in brokers] == [0, 1, 0]
    assert cluster.revive() == []


def test_a_connection_from_a_port_lingering_in_time_wait_is_still_its_owners(tmp_path, monkeypatch) -> None:
    """The kernel hands out an ephemeral port again, to another destination, while an earlier connection from it is
    in TIME_WAIT (inode 0, no owner). Looked up by its local port alone, a follower's fetch connection whose TIME_WAIT
    line came first was a client's: a lag fault never froze it and the follower stayed in the ISR (CI, seed 11 of
    elect-outside-isr). /proc/net/tcp is copied with the TIME_WAIT line first, its order being the kernel's hash."""
    earlier, target = socket.socket(), socket.socket()
    for server in (earlier, target):
        server.bind(("127.0.0.1", 0))
        server.listen()
    first = socket.socket()
    first.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # A port of the kernel's own choosing could be taken, while it lingers, by any connection of the machine to
    # another destination (CI: the bind below failed EADDRINUSE); one from below the ephemeral range cannot.
    first.bind(("127.0.0.1", restartable_port()))
    first.connect(earlier.getsockname())
    port = first.getsockname()[1]
    accepted, _ = earlier.accept()
    first.close()  # closed first by the client: its end lingers in TIME_WAIT
    accepted.close()
    local = f"0100007F:{port:04X}"

    def lingering() -> list[str]:
        with open(proxy_module.TCP_TABLE) as table:
            return [line for line in table if line.split()[1] == local and line.split()[3] == "06"]
    eventually(lingering, "the closed connection's end to reach TIME_WAIT")
    live = socket.socket()
    live.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    live.bind(("127.0.0.1", port))
    live.connect(target.getsockname())
    try:
        with open(proxy_module.TCP_TABLE) as table:
            header, *lines = table.readlines()
        first_lines = lingering()
        copy = tmp_path / "tcp"
        copy.write_text(header + "".join(first_lines + [line for line in lines if line not in first_lines]))
        monkeypatch.setattr(proxy_module, "TCP_TABLE", str(copy))
        assert owner_of(port, target.getsockname()[1], {"b1": os.getpid()}) == "b1"
        assert owner_of(port, earlier.getsockname()[1], {"b1": os.getpid()}) == CLIENT  # the TIME_WAIT end
    finally:
        for sock in (live, earlier, target):
            sock.close()


def test_the_connections_into_a_broker_are_counted_by_the_source_taken_for_each(tmp_path) -> None:
    from types import SimpleNamespace

    from chaos.cluster import ChaosCluster

    server, port = _echo_server()
    cluster = ChaosCluster(tmp_path)
    cluster.proxies = ProxyHost()
    try:
        front = cluster.proxies.add(Proxy("b0", lambda: {"b1": os.getpid()}, os.getpid))
        front.target_port = port
        mine = socket.create_connection(("127.0.0.1", front.port), 5)
        mine.settimeout(5)
        mine.sendall(b"ping")
        assert mine.recv(4) == b"ping"  # accepted and looked up
        assert cluster.connections_into(SimpleNamespace(front=front)) == {"b1": 1}  # type: ignore[arg-type]
        mine.close()
    finally:
        cluster.proxies.close()
        server.close()
