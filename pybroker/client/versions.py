"""API version negotiation, as pure functions over version ranges.

After ApiVersions, a client uses for each API the highest version both sides know:
min(our codec's max, the broker's max), provided that is not below either side's minimum.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from pybroker.client.errors import UnsupportedVersionError
from pybroker.protocol.api_keys import REQUEST_LATEST_UNSTABLE, REQUEST_VERSIONS
from pybroker.protocol.messages import API_NAMES


@dataclass(frozen=True, slots=True)
class VersionRange:
    min: int
    max: int


@lru_cache(maxsize=1)
def client_versions() -> dict[int, VersionRange]:
    """Versions our codecs can speak per API key; an unstable latest version is left out, as in Kafka. From the
    generated version table, so no message class is imported for APIs this client never calls."""
    return {key: VersionRange(low, high - (1 if key in REQUEST_LATEST_UNSTABLE else 0))
            for key, (low, high) in REQUEST_VERSIONS.items()}


def usable_version(ours: VersionRange | None, theirs: VersionRange | None) -> int | None:
    """The version to use for one API, or None when the ranges do not overlap (or one side lacks it)."""
    if ours is None or theirs is None:
        return None
    version = min(ours.max, theirs.max)
    return version if version >= max(ours.min, theirs.min) else None


def negotiate(ours: Mapping[int, VersionRange], theirs: Mapping[int, VersionRange]) -> dict[int, int]:
    """The usable version of every API both sides support in overlapping ranges."""
    chosen = {}
    for key, broker_range in theirs.items():
        version = usable_version(ours.get(key), broker_range)
        if version is not None:
            chosen[key] = version
    return chosen


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, f"UNKNOWN({api_key})")


@dataclass(frozen=True, slots=True)
class NegotiatedVersions:
    """What one broker advertised and the version we picked per API."""

    broker: Mapping[int, VersionRange]
    chosen: Mapping[int, int]

    @classmethod
    def from_broker(cls, broker: Mapping[int, VersionRange],
                    ours: Mapping[int, VersionRange] | None = None) -> NegotiatedVersions:
        return cls(dict(broker), negotiate(client_versions() if ours is None else ours, broker))

    def version_for(self, api_key: int, minimum: int = 0) -> int:
        """The version to send; raise when there is none at or above ``minimum``."""
        version = self.chosen.get(api_key)
        if version is None or version < minimum:
            advertised = self.broker.get(api_key)
            offered = f"{advertised.min} to {advertised.max}" if advertised else "none"
            raise UnsupportedVersionError(
                f"The broker does not support a usable version of {api_name(api_key)} "
                f"(broker versions: {offered}; needed at least {minimum})")
        return version
