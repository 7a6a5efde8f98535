"""The handler registry's promise to the dispatcher: every version a handler serves is one its request
class can decode (the dispatcher reads requests with the class's generated codec for that version)."""

from __future__ import annotations

from pybroker.server.handlers import ALL_HANDLERS


def test_every_served_version_is_one_the_request_class_has() -> None:
    outside = [(h.api_key, (h.min_version, h.max_version), (h.request_class.MIN_VERSION, h.request_class.MAX_VERSION))
               for h in ALL_HANDLERS
               if not h.request_class.MIN_VERSION <= h.min_version <= h.max_version <= h.request_class.MAX_VERSION]
    assert outside == []
