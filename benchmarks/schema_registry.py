"""Schema registry latency: registration and lookups under concurrent clients, p50 and p99.

    python -m benchmarks.schema_registry [--clients 8] [--registrations 200] [--lookups 2000]

Not a test, and not side by side with a peer (Tansu has no registry): absolute figures for this tree's
broker, started on a free loopback port with its registry on. Each client is a thread with its own
keep-alive HTTP connection (raw HTTP: confluent-kafka's client would answer repeated lookups from its
cache). Registration: every client registers distinct Avro records, each a new version of its own subject
(so each pays a BACKWARD check against the version before it). Lookups: GET /schemas/ids/{id} and
POST /subjects/{s} (schema to version) for ids and schemas registered above.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import statistics
import threading
import time
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

from pybroker.testing import EmbeddedBroker

T = TypeVar("T")


def schema(client: int, version: int) -> str:
    fields = [{"name": f"f{i}", "type": "long", "default": 0} for i in range(version)]
    return json.dumps({"type": "record", "name": f"Bench{client}", "namespace": "bench",
                       "fields": [{"name": "id", "type": "string"}, *fields]})


class Client:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.hostname is None:
            raise ValueError(f"no host in {url!r}")
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def call(self, method: str, path: str, body: object = None) -> Any:
        """The decoded JSON answer."""
        payload = None if body is None else json.dumps(body)
        self.connection.request(method, path, payload, {"Content-Type": "application/vnd.schemaregistry.v1+json"})
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
        return json.loads(data)


def run_clients(count: int, work: Callable[[int, Client, list[float]], None], url: str) -> list[float]:
    samples: list[list[float]] = [[] for _ in range(count)]
    barrier = threading.Barrier(count)

    def body(index: int) -> None:
        client = Client(url)
        barrier.wait()
        work(index, client, samples[index])

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [s for per_client in samples for s in per_client]


def timed(samples: list[float], action: Callable[[], T]) -> T:
    start = time.perf_counter()
    result = action()
    samples.append((time.perf_counter() - start) * 1000)
    return result


def summary(name: str, samples: list[float], wall_s: float) -> dict[str, object]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"operation": name, "count": len(samples), "p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(p99, 2), "per_second": round(len(samples) / wall_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--registrations", type=int, default=200, help="per client")
    parser.add_argument("--lookups", type=int, default=2000, help="per client, of each kind")
    args = parser.parse_args()
    results = []
    with EmbeddedBroker(schema_registry=True) as broker:
        url = broker.schema_registry_url
        Client(url).call("GET", "/subjects")  # creates and replays _schemas before the clock starts
        ids: dict[int, list[int]] = {}

        def register(index: int, client: Client, samples: list[float]) -> None:
            ids[index] = [timed(samples, functools.partial(client.call, "POST", f"/subjects/bench-{index}/versions",
                                                           {"schema": schema(index, v)}))["id"]
                          for v in range(args.registrations)]

        def by_id(index: int, client: Client, samples: list[float]) -> None:
            mine = ids[index]
            for i in range(args.lookups):
                timed(samples, lambda: client.call("GET", f"/schemas/ids/{mine[i % len(mine)]}"))

        def by_schema(index: int, client: Client, samples: list[float]) -> None:
            for i in range(args.lookups):
                version = i % args.registrations
                timed(samples, lambda: client.call("POST", f"/subjects/bench-{index}",
                                                   {"schema": schema(index, version)}))

        for name, work in (("register (new version, BACKWARD check)", register),
                           ("GET /schemas/ids/{id}", by_id), ("POST /subjects/{s} (lookup)", by_schema)):
            start = time.perf_counter()
            samples = run_clients(args.clients, work, url)
            results.append(summary(name, samples, time.perf_counter() - start))
        assert len({i for per_client in ids.values() for i in per_client}) == args.clients * args.registrations
    print(f"{args.clients} concurrent clients")
    print(f"{'operation':42} {'count':>7} {'p50 ms':>8} {'p99 ms':>8} {'ops/s':>8}")
    for row in results:
        print(f"{row['operation']:42} {row['count']:>7} {row['p50_ms']:>8} {row['p99_ms']:>8} {row['per_second']:>8}")


if __name__ == "__main__":
    main()
