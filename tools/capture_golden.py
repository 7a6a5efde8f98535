#!/usr/bin/env python3
"""Capture the first request frames real Kafka clients send, as golden test vectors.

Starts a throwaway TCP listener on 127.0.0.1 (ephemeral port, loopback only) and
points confluent-kafka (librdkafka), kafka-python and aiokafka at it, one client
at a time, each in a subprocess with a hard time limit.  The listener answers
ApiVersions, Metadata (one topic ``golden`` led by the listener itself) and
InitProducerId, so the clients go on to send a ProduceRequest carrying a real
record batch; that, and anything else, is never answered.
Every distinct (client, API, version) request frame is written, size prefix
included, to ``tests/golden/<client>_<api>_v<N>.bin``.

Usage: ``python tools/capture_golden.py [--out tests/golden] [--budget 8]``
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pybroker.protocol.api_keys import REQUEST_VERSIONS  # noqa: E402
from pybroker.protocol.errors import ProtocolError  # noqa: E402
from pybroker.protocol.frame import (  # noqa: E402
    FrameDecoder,
    decode_request_header,
    encode_response,
)
from pybroker.protocol.messages import (  # noqa: E402
    API_NAMES,
    ApiVersionsResponse,
    InitProducerIdResponse,
    MetadataResponse,
)

API_VERSIONS = 18
METADATA = 3
INIT_PRODUCER_ID = 22
TOPIC = "golden"

# Each client script gets the port as argv[1]; it must give up on its own well
# within the budget, and is killed at the budget regardless.
CLIENTS: dict[str, str] = {
    "confluent": """
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": f"127.0.0.1:{sys.argv[1]}", "client.id": "golden",
              "socket.timeout.ms": 3000, "message.timeout.ms": 4000})
p.produce("golden", b"value", key=b"key")
p.flush(6)
""",
    "kafkapython-producer": """
import sys
from kafka import KafkaProducer
try:
    p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{sys.argv[1]}", client_id="golden",
                      request_timeout_ms=4000, max_block_ms=4000, linger_ms=0)
    p.send("golden", key=b"key", value=b"value").get(timeout=5)
except Exception as e:
    print("kafka-python producer:", type(e).__name__, e)
""",
    "kafkapython-admin": """
import sys
from kafka.admin import KafkaAdminClient
try:
    KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{sys.argv[1]}", client_id="golden",
                     request_timeout_ms=4000).close()
except Exception as e:
    print("kafka-python admin:", type(e).__name__, e)
""",
    "aiokafka": """
import asyncio, sys
from aiokafka import AIOKafkaProducer
async def main():
    p = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{sys.argv[1]}", client_id="golden",
                         request_timeout_ms=4000)
    try:
        await asyncio.wait_for(p.start(), 5)
        await asyncio.wait_for(p.send_and_wait("golden", b"value", key=b"key"), 5)
    except Exception as e:
        print("aiokafka:", type(e).__name__, e)
    finally:
        try:
            await asyncio.wait_for(p.stop(), 2)
        except Exception:
            pass
asyncio.run(main())
""",
}


def api_versions_reply(version: int) -> bytes:
    """ApiVersions response body advertising every API in the specs."""
    keys = [ApiVersionsResponse.ApiVersion(k, lo, hi) for k, (lo, hi) in
            sorted(REQUEST_VERSIONS.items())]
    if version > ApiVersionsResponse.MAX_VERSION:  # KIP-511: v0 body with UNSUPPORTED_VERSION
        return ApiVersionsResponse(error_code=35, api_keys=[
            ApiVersionsResponse.ApiVersion(API_VERSIONS, 0, ApiVersionsResponse.MAX_VERSION)
        ]).encode(0)
    return ApiVersionsResponse(api_keys=keys).encode(version)


def metadata_reply(version: int, port: int) -> bytes:
    """Metadata response: this listener is node 1 and leads partition 0 of ``golden``."""
    m = MetadataResponse
    return m(
        brokers=[m.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=port)],
        cluster_id="golden-cluster",
        controller_id=1,
        topics=[m.MetadataResponseTopic(
            name=TOPIC, topic_id=uuid.UUID(int=0x601DE9), partitions=[
                m.MetadataResponsePartition(partition_index=0, leader_id=1, leader_epoch=0,
                                            replica_nodes=[1], isr_nodes=[1])])],
    ).encode(version)


class Recorder:
    """Loopback listener recording request frames under the current client label."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.label = ""
        self.frames: dict[tuple[str, int, int], bytes] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn, self.label), daemon=True).start()

    def handle(self, conn: socket.socket, label: str) -> None:
        dec = FrameDecoder(1 << 20)
        conn.settimeout(0.2)
        with conn:
            while not self.stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                try:
                    frames = dec.feed(data)
                except ProtocolError as e:
                    print(f"[{label}] bad frame: {e}")
                    return
                for payload in frames:
                    self.record(conn, label, bytes(payload))

    def record(self, conn: socket.socket, label: str, payload: bytes) -> None:
        header, _ = decode_request_header(payload)
        key, version = header.request_api_key, header.request_api_version
        with self.lock:
            if (label, key, version) not in self.frames:
                self.frames[(label, key, version)] = len(payload).to_bytes(4, "big") + payload
                print(f"[{label}] captured {API_NAMES.get(key, key)} v{version} "
                      f"({len(payload)} bytes, client_id={header.client_id!r})")
        if key == API_VERSIONS:
            body = api_versions_reply(version)
        elif key == METADATA:
            body = metadata_reply(version, self.port)
        elif key == INIT_PRODUCER_ID:  # idempotent producers (kafka-python) need an id first
            body = InitProducerIdResponse(producer_id=4242, producer_epoch=0).encode(version)
        else:
            return  # never answered: the client times out
        conn.sendall(encode_response(header.correlation_id, key, version, body))


def api_file_name(key: int) -> str:
    name = API_NAMES.get(key, f"key{key}")
    out = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "golden")
    ap.add_argument("--budget", type=float, default=8.0, help="seconds per client (hard limit)")
    ap.add_argument("--clients", nargs="*", default=list(CLIENTS))
    args = ap.parse_args(argv)
    rec = Recorder()
    server = threading.Thread(target=rec.serve, daemon=True)
    server.start()
    try:
        for label in args.clients:
            rec.label = label
            started = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-c", CLIENTS[label], str(rec.port)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                out, _ = proc.communicate(timeout=args.budget)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate(timeout=5)
            took = time.monotonic() - started
            print(f"[{label}] client finished in {took:.1f}s (rc={proc.returncode})")
            if out.strip():
                print("   " + out.strip().replace("\n", "\n   ")[:500])
            time.sleep(0.3)  # let the handler record anything still in flight
    finally:
        rec.stop.set()
        rec.sock.close()
        server.join(timeout=2)
    args.out.mkdir(parents=True, exist_ok=True)
    for (label, key, version), frame in sorted(rec.frames.items()):
        path = args.out / f"{label}_{api_file_name(key)}_v{version}.bin"
        path.write_bytes(frame)
        print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return 0 if rec.frames else 1


if __name__ == "__main__":
    sys.exit(main())
