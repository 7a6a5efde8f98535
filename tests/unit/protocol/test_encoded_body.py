"""EncodedBody: a body encoded earlier frames exactly like the message it was encoded from."""

from __future__ import annotations

import pytest

from pybroker.protocol.errors import EncodeError
from pybroker.protocol.frame import EncodedBody, encode_response_message, encode_response_parts
from pybroker.protocol.messages import MetadataResponse

RESPONSE = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(node_id=0, host="h", port=9092)],
                            cluster_id="c", controller_id=0, topics=[])


@pytest.mark.parametrize("version", [0, 8, 9, 12])  # header v0 below 9, v1 (tagged fields) from 9
def test_an_encoded_body_frames_like_its_message(version: int) -> None:
    stored = EncodedBody(version, RESPONSE.encode(version))
    framed = b"".join(encode_response_parts(7, 3, version, stored))  # type: ignore[arg-type]
    assert framed == bytes(encode_response_message(7, 3, version, RESPONSE))


def test_an_encoded_body_is_refused_at_another_version() -> None:
    with pytest.raises(EncodeError):
        encode_response_parts(7, 3, 12, EncodedBody(11, RESPONSE.encode(11)))
