"""Golden request frames captured from real clients (tools/capture_golden.py).

Each must decode with decode_request_header + the right request class and
re-encode byte-identically: proof that we read exactly what real clients write.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pybroker.protocol.frame import FrameDecoder, decode_request_header, request_header_version
from pybroker.protocol.messages import API_NAMES, REQUEST_CLASSES
from pybroker.protocol.primitives import Reader, Writer

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
FILES = sorted(GOLDEN.glob("*.bin"))
_NAME = re.compile(r"^(?P<client>[a-z-]+)_(?P<api>[a-z_]+)_v(?P<version>\d+)\.bin$")
_API_BY_FILE_NAME = {re.sub(r"(?<!^)(?=[A-Z])", "_", n).lower(): k for k, n in API_NAMES.items()}


def test_golden_frames_exist_for_every_client() -> None:
    clients = {_NAME.match(p.name).group("client") for p in FILES}  # type: ignore[union-attr]
    assert {"confluent", "kafkapython-producer", "aiokafka"} <= clients
    apis = {_NAME.match(p.name).group("api") for p in FILES}  # type: ignore[union-attr]
    assert {"api_versions", "metadata", "produce"} <= apis


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_frame_roundtrip(path: Path) -> None:
    m = _NAME.match(path.name)
    assert m, f"unexpected golden file name {path.name}"
    raw = path.read_bytes()
    (frame,) = FrameDecoder(1 << 20).feed(raw)
    header, offset = decode_request_header(frame)
    assert header.request_api_key == _API_BY_FILE_NAME[m.group("api")]
    assert header.request_api_version == int(m.group("version"))
    cls = REQUEST_CLASSES[header.request_api_key]
    r = Reader(frame, offset)
    body = cls.read(r, header.request_api_version)
    assert r.remaining() == 0
    w = Writer()
    header.write(w, request_header_version(header.request_api_key, header.request_api_version))
    body.write(w, header.request_api_version)
    assert bytes(w.buf) == bytes(frame)
    if m.group("api") == "produce":
        records = body.topic_data[0].partition_data[0].records
        assert isinstance(records, memoryview) and len(records) > 61
        assert records[16] == 2  # record batch magic v2
    if m.group("api") == "api_versions" and header.request_api_version >= 3:
        assert body.client_software_name and body.client_software_version
