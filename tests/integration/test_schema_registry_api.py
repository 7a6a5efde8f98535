"""The registry's REST API over raw HTTP: Confluent's JSON shapes and error codes, and bad input that
must leave ``_schemas`` untouched and the broker serving."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Consumer, Producer

from pybroker.testing import EmbeddedBroker

RECORD = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("registry-api"), schema_registry=True) as embedded:
        yield embedded


class Api:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "", parts.port or 0

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            payload = raw if raw is not None else None if body is None else json.dumps(body).encode()
            connection.request(method, path, payload, {"Content-Type": CONTENT_TYPE} if payload is not None else {})
            response = connection.getresponse()
            data = response.read()
            assert response.getheader("Content-Type") == CONTENT_TYPE
            try:
                return response.status, json.loads(data)
            except ValueError:
                return response.status, data.decode()
        finally:
            connection.close()

    def error(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, int]:
        status, answer = self.call(method, path, body, raw)
        assert isinstance(answer, dict) and set(answer) == {"error_code", "message"}, answer
        return status, answer["error_code"]


@pytest.fixture(scope="module")
def api(broker: EmbeddedBroker) -> Api:
    return Api(broker.schema_registry_url)


def register(api: Api, subject: str, schema: Any, **extra: Any) -> dict[str, Any]:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    status, answer = api.call("POST", f"/subjects/{subject}/versions", {"schema": text, **extra})
    assert status == 200, answer
    return answer


def schemas_records(broker: EmbeddedBroker) -> list[tuple[bytes, bytes | None]]:
    """Every record of the _schemas topic, read with a real consumer."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "inspect-schemas",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.subscribe(["_schemas"])
    found = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None
            if message.error() is not None:
                break  # partition EOF
            found.append((message.key(), message.value()))
    finally:
        consumer.close()
    return found


def test_shapes_of_the_read_endpoints(api: Api) -> None:
    assert api.call("GET", "/schemas/types") == (200, ["JSON", "PROTOBUF", "AVRO"])
    first = register(api, "shapes-value", RECORD)
    assert set(first) >= {"id", "subject", "version"}
    schema_id = first["id"]
    status, by_id = api.call("GET", f"/schemas/ids/{schema_id}?fetchMaxId=true")
    assert status == 200 and json.loads(by_id["schema"]) == RECORD and by_id["maxId"] >= schema_id
    assert "schemaType" not in by_id  # Avro, as Confluent answers it
    assert api.call("GET", f"/schemas/ids/{schema_id}/schema")[1] == RECORD
    assert api.call("GET", f"/schemas/ids/{schema_id}/subjects") == (200, ["shapes-value"])
    assert api.call("GET", f"/schemas/ids/{schema_id}/versions") == (200, [{"subject": "shapes-value", "version": 1}])
    assert api.call("GET", f"/schemas/guids/{first['guid']}")[1]["schema"] == by_id["schema"]
    status, version = api.call("GET", "/subjects/shapes-value/versions/latest")
    assert (version["subject"], version["version"], version["id"]) == ("shapes-value", 1, schema_id)
    assert api.call("GET", "/subjects/shapes-value/versions/-1")[1] == version
    assert api.call("GET", "/subjects/shapes-value/versions") == (200, [1])
    assert "shapes-value" in api.call("GET", "/subjects?subjectPrefix=shapes")[1]
    status, found = api.call("POST", "/subjects/shapes-value", {"schema": json.dumps(RECORD, indent=2)})
    assert status == 200 and found["id"] == schema_id and found["version"] == 1  # whitespace is insignificant
    assert api.call("GET", "/subjects/shapes-value/versions/1/referencedby") == (200, [])
    assert api.call("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert api.call("GET", "/mode") == (200, {"mode": "READWRITE"})


def test_not_found_codes(api: Api) -> None:
    register(api, "nf-value", RECORD)
    assert api.error("GET", "/subjects/missing/versions") == (404, 40401)
    assert api.error("GET", "/subjects/nf-value/versions/9") == (404, 40402)
    assert api.error("GET", "/schemas/ids/987654") == (404, 40403)
    assert api.error("POST", "/subjects/missing", {"schema": json.dumps(RECORD)}) == (404, 40401)
    other = {"type": "record", "name": "Other", "fields": []}
    assert api.error("POST", "/subjects/nf-value", {"schema": json.dumps(other)}) == (404, 40403)
    assert api.error("GET", "/config/nf-value") == (404, 40408)
    assert api.call("GET", "/config/nf-value?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    assert api.error("GET", "/mode/nf-value") == (404, 40409)
    assert api.error("GET", "/no/such/path") == (404, 404)
    assert api.error("PATCH", "/subjects") == (405, 405)


@pytest.mark.parametrize("schema_type,schema", [
    ("AVRO", '{"type": "record", "name": "X"}'),
    ("AVRO", "{not json"),
    ("AVRO", '{"type": "no.such.Type"}'),
    ("JSON", '{"type": 12}'),
    ("JSON", '{"$ref": "elsewhere.json"}'),
    ("PROTOBUF", 'syntax = "proto3"; message M { strin a = 1; }'),
    ("PROTOBUF", 'syntax = "proto3"; import "missing.proto"; message M { int32 a = 1; }'),
    ("XML", "<schema/>"),
])
def test_malformed_schemas_are_42201_and_write_nothing(api: Api, broker: EmbeddedBroker, schema_type: str,
                                                       schema: str) -> None:
    subject = f"bad-{schema_type.lower()}"
    assert api.error("POST", f"/subjects/{subject}/versions", {"schema": schema, "schemaType": schema_type}) \
        == (422, 42201)
    assert subject not in api.call("GET", "/subjects?deleted=true")[1]
    assert not any(key is not None and subject.encode() in key for key, _ in schemas_records(broker))


def test_bad_versions_levels_and_modes(api: Api) -> None:
    register(api, "bv-value", RECORD)
    for version in ("0", "abc", "2147483648", "-2"):
        assert api.error("GET", f"/subjects/bv-value/versions/{version}") == (422, 42202)
    assert api.error("PUT", "/config", {"compatibility": "SIDEWAYS"}) == (422, 42203)
    assert api.error("PUT", "/config/bv-value", {}) == (422, 42203)
    assert api.error("PUT", "/mode/bv-value", {"mode": "WRITEONLY"}) == (422, 42204)
    assert api.error("POST", "/subjects/bv-value/versions", raw=b"{oops") == (422, 422)
    assert api.error("POST", "/subjects/bv-value/versions", raw=b"[1, 2]") == (422, 422)
    assert api.error("POST", "/subjects/bv-value/versions", {"schema": "\"int\"", "schemaType": 5}) == (422, 42201)
    assert api.error("POST", "/subjects/bv-value/versions", {"schema": 7}) == (422, 42201)
    assert api.error("POST", "/subjects/bv-value/versions", {"schema": "\"int\"", "references": {}}) == (422, 42201)
    assert api.error("GET", "/schemas?offset=first") == (422, 422)


def test_deletes_soft_then_hard(api: Api) -> None:
    register(api, "del-value", RECORD)
    assert api.error("DELETE", "/subjects/del-value?permanent=true") == (404, 40405)
    assert api.error("DELETE", "/subjects/del-value/versions/1?permanent=true") == (404, 40407)
    assert api.call("DELETE", "/subjects/del-value") == (200, [1])
    assert api.error("DELETE", "/subjects/del-value") == (404, 40404)
    assert api.error("GET", "/subjects/del-value/versions") == (404, 40401)
    assert api.call("GET", "/subjects/del-value/versions?deleted=true") == (200, [1])
    assert "del-value" in api.call("GET", "/subjects?deleted=true")[1]
    assert api.call("DELETE", "/subjects/del-value?permanent=true") == (200, [1])
    assert api.error("GET", "/subjects/del-value/versions?deleted=true") == (404, 40401)
    assert api.error("DELETE", "/subjects/del-value?permanent=true") == (404, 40401)


def test_references_to_deleted_subjects_and_cycles(api: Api, broker: EmbeddedBroker) -> None:
    base = register(api, "refbase", {"type": "record", "name": "Base", "fields": []})
    api.call("DELETE", "/subjects/refbase")
    user = {"type": "record", "name": "User", "fields": [{"name": "b", "type": "Base"}]}
    reference = [{"name": "Base", "subject": "refbase", "version": 1}]
    assert api.error("POST", "/subjects/refuser/versions", {"schema": json.dumps(user), "references": reference}) \
        == (422, 42201)
    assert base["id"] > 0
    # A cycle can only come from the topic itself (another writer): it is refused, not followed forever.
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    for subject, other in (("cyc-a", "cyc-b"), ("cyc-b", "cyc-a")):
        key = json.dumps({"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1})
        value = {"subject": subject, "version": 1, "id": 900 + len(subject + other) + ord(subject[-1]),
                 "schema": json.dumps({"type": "record", "name": subject.replace("-", "_"), "fields": []}),
                 "references": [{"name": other.replace("-", "_"), "subject": other, "version": 1}], "deleted": False}
        producer.produce("_schemas", json.dumps(value).encode(), key.encode(), partition=0)
    assert producer.flush(30) == 0
    api.call("PUT", "/config/refcycle", {"compatibility": "NONE"})  # also waits for the reader to pass them
    cyclic = [{"name": "cyc_a", "subject": "cyc-a", "version": 1}]
    assert api.error("POST", "/subjects/refcycle/versions", {"schema": json.dumps(user).replace("Base", "cyc_a"),
                                                             "references": cyclic}) == (422, 42201)


def test_readonly_mode_refuses_writes(api: Api) -> None:
    register(api, "ro-value", RECORD)
    assert api.call("PUT", "/mode/ro-value", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    evolved = {**RECORD, "fields": RECORD["fields"] + [{"name": "b", "type": "int", "default": 0}]}
    assert api.error("POST", "/subjects/ro-value/versions", {"schema": json.dumps(evolved)}) == (422, 42205)
    assert api.error("DELETE", "/subjects/ro-value") == (422, 42205)
    assert api.call("DELETE", "/mode/ro-value") == (200, {"mode": "READONLY"})
    assert register(api, "ro-value", evolved)["version"] == 2


def test_import_mode_keeps_the_given_ids(api: Api) -> None:
    register(api, "import-guard", RECORD)
    assert api.error("PUT", "/mode", {"mode": "IMPORT"}) == (422, 42205)  # subjects exist: needs force
    assert api.call("PUT", "/mode/imported?force=true", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    schema = json.dumps({"type": "fixed", "name": "Hash", "size": 16})
    answer = register(api, "imported", schema, id=5000, version=3)
    assert (answer["id"], answer["version"]) == (5000, 3)
    other = json.dumps({"type": "fixed", "name": "Hash2", "size": 8})
    assert api.error("POST", "/subjects/imported/versions", {"schema": other, "id": 5000}) == (422, 42207)
    assert api.error("POST", "/subjects/imported/versions", {"schema": other}) == (422, 42205)
    api.call("PUT", "/mode/imported", {"mode": "READWRITE"})
    assert api.call("GET", "/schemas/ids/5000")[1]["schema"] == schema.replace(" ", "")
    assert api.call("GET", "/schemas/ids/5000?fetchMaxId=true")[1]["maxId"] >= 5000


def test_compatibility_endpoint_verbose(api: Api) -> None:
    register(api, "cmp-value", RECORD)
    evolved = {**RECORD, "fields": RECORD["fields"] + [{"name": "b", "type": "string"}]}
    status, answer = api.call("POST", "/compatibility/subjects/cmp-value/versions/latest?verbose=true",
                              {"schema": json.dumps(evolved)})
    assert status == 200 and answer["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in message for message in answer["messages"])
    assert api.call("POST", "/compatibility/subjects/cmp-value/versions", {"schema": json.dumps(RECORD)}) \
        == (200, {"is_compatible": True})
    assert api.error("POST", "/compatibility/subjects/cmp-value/versions/7", {"schema": json.dumps(RECORD)}) \
        == (404, 40402)
    assert api.error("POST", "/compatibility/subjects/cmp-value/versions/zero", {"schema": json.dumps(RECORD)}) \
        == (422, 42202)


def test_protobuf_serialized_format(api: Api) -> None:
    import base64

    from google.protobuf import descriptor_pb2

    text = 'syntax = "proto3";\npackage p;\n\nmessage M {\n  string a = 1;\n}\n'
    answer = register(api, "proto-fmt", text, schemaType="PROTOBUF")
    status, serialized = api.call("GET", f"/schemas/ids/{answer['id']}?format=serialized")
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized["schema"]))
    assert status == 200 and descriptor.package == "p" and descriptor.message_type[0].field[0].name == "a"
    assert register(api, "proto-fmt", serialized["schema"], schemaType="PROTOBUF")["id"] == answer["id"]


def test_oversized_schemas_and_bodies(api: Api, broker: EmbeddedBroker) -> None:
    big = json.dumps({"type": "string", "doc": "x" * (10 * 1024 * 1024)})
    assert api.error("POST", "/subjects/big/versions", {"schema": big}) == (422, 42209)
    with socket.create_connection((api.host, api.port), timeout=10) as raw:  # refused before the body is read
        raw.sendall(b"POST /subjects/big/versions HTTP/1.1\r\nHost: x\r\nContent-Length: 22020096\r\n\r\n{")
        assert raw.recv(1024).startswith(b"HTTP/1.1 413 ")
    assert "big" not in api.call("GET", "/subjects?deleted=true")[1]


def test_malformed_http_leaves_the_registry_serving(api: Api) -> None:
    for garbage in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70000 + b"\r\n\r\n",
                    b"POST /subjects/x/versions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", b"\x16\x03\x01"):
        with socket.create_connection((api.host, api.port), timeout=10) as raw:
            raw.sendall(garbage)
            raw.shutdown(socket.SHUT_WR)
            reply = raw.recv(1024)
            assert reply == b"" or reply.startswith(b"HTTP/1.1 4")
    assert api.call("GET", "/schemas/types")[0] == 200



def test_random_requests_never_get_a_500(api: Api, broker: EmbeddedBroker) -> None:
    """Seeded random requests over every route (paths, parameters and bodies good and bad): each gets a
    4xx or a 200, never a server error, and the broker logs no traceback."""
    import random

    from pybroker.schema_registry.routes import ROUTES

    rng = random.Random(35)
    segments = {"ids": ["1", "0", "-1", "abc", "99999999999"], "subjects": ["fz1", "fz2", "a%2Fb", "%00", "x" * 300],
                "versions": ["1", "latest", "-1", "0", "x"]}
    schemas = ['"int"', '{"type":"record","name":"A","fields":[]}', '{"type":"object"}', 'syntax = "proto3"; message M {}',
               "{", "", "null", "[]"]
    bodies = [None, {}, [], "x", 5, {"compatibility": "FULL"}, {"mode": "READONLY"}, {"mode": "READWRITE"},
              {"schema": '"int"', "references": [{"name": "a", "subject": "fz1", "version": 1}]},
              {"schema": '"int"', "references": [1]}, {"schema": '"int"', "metadata": {"properties": {"a": "b"}}},
              {"schema": '"int"', "id": 3, "version": 2}, {"compatibility": None}, {"schema": None},
              *({"schema": text, "schemaType": kind} for text in schemas for kind in (None, "AVRO", "JSON", "PROTOBUF"))]
    params = ["", "?deleted=true", "?permanent=true", "?normalize=true", "?verbose=true", "?format=serialized",
              "?fetchMaxId=true", "?defaultToGlobal=true", "?force=true", "?key=a&value=b", "?limit=2&offset=1"]
    try:
        for _ in range(300):
            route = rng.choice(ROUTES)
            path, previous = [], ""
            for part in route.pattern:
                path.append(rng.choice(segments.get(previous, segments["subjects"])) if part == "*" else part)
                previous = part
            body = rng.choice(bodies)
            raw = None if body is None else json.dumps(body).encode()
            status, _ = api.call(route.method, "/" + "/".join(path) + rng.choice(params), raw=raw)
            assert status < 500, f"{route.method} /{'/'.join(path)} with {body!r}: {status}"
    finally:  # the global mode and level back as the module's other tests expect them
        api.call("PUT", "/mode", {"mode": "READWRITE"})
        api.call("DELETE", "/config")
    assert "Traceback" not in broker.log_tail(5000)
