"""Cross-check our encodings against kafka-python's independent JSON-spec codec.

For every message that kafka-python (3.x) also implements, at every version both
support: our encoding of a random sample must survive kafka-python's
decode -> encode byte-for-byte.  A misread field on either side changes bytes.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
import zlib
from typing import Any

import pytest
from protocol_samples import all_message_classes, sample

from pybroker.protocol.schema import Message

kp = pytest.importorskip("kafka.protocol")
try:
    from kafka.protocol.api_message import ApiMessage
except ImportError:  # pragma: no cover - older kafka-python without the JSON codec
    pytest.skip("kafka-python has no JSON-driven ApiMessage codec", allow_module_level=True)


def _kafka_python_classes() -> dict[str, Any]:
    for mod in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        try:
            importlib.import_module(mod.name)
        except Exception:  # noqa: BLE001 - optional submodules may need extras
            pass
    out: dict[str, Any] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        c = stack.pop()
        stack.extend(c.__subclasses__())
        if getattr(c, "_class_version", 1) is None:
            out[c.__name__] = c
    return out


_THEIRS = _kafka_python_classes()
CASES: list[tuple[type[Message], Any, int]] = []
for _ours in all_message_classes():
    _theirs = _THEIRS.get(_ours.__name__)
    if _theirs is None:
        continue
    _lo, _hi = _theirs.valid_versions
    for _v in range(max(_lo, _ours.MIN_VERSION), min(_hi, _ours.MAX_VERSION) + 1):
        CASES.append((_ours, _theirs, _v))


@pytest.mark.parametrize("ours,theirs,version", CASES,
                         ids=[f"{c.__name__}-v{v}" for c, _, v in CASES])
def test_kafka_python_reencodes_our_bytes(ours: type[Message], theirs: Any, version: int) -> None:
    seed = zlib.crc32(f"x:{ours.__name__}:{version}".encode())
    for i, null_rate in enumerate((0.0, 0.3)):
        obj = sample(ours, version, random.Random(seed + i), null_rate=null_rate)
        if ours.__name__ == "ApiVersionsResponse":
            obj.error_code = 0  # kafka-python decodes any error response as v0 (KIP-511)
        data = obj.encode(version)
        decoded = theirs.decode(data, version=version)
        if getattr(decoded, "_header", None) is None:
            decoded._header = None  # kafka-python leaves this slot unset on decode
        assert bytes(decoded.encode(version=version)) == data, decoded


def test_crosscheck_covers_the_common_apis() -> None:
    assert len({c for c, _, _ in CASES}) >= 90
