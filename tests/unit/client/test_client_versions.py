"""Version negotiation: min(our max, broker max), inside both ranges, or nothing."""

from __future__ import annotations

import pytest

from pybroker.client import NegotiatedVersions, UnsupportedVersionError, VersionRange
from pybroker.client.versions import client_versions, negotiate, usable_version
from pybroker.protocol.api_keys import ApiKey


def test_usable_version_is_the_lower_of_both_maxima() -> None:
    assert usable_version(VersionRange(0, 12), VersionRange(0, 9)) == 9
    assert usable_version(VersionRange(0, 7), VersionRange(2, 11)) == 7


def test_no_usable_version_when_ranges_do_not_overlap() -> None:
    assert usable_version(VersionRange(0, 2), VersionRange(3, 5)) is None  # node too new
    assert usable_version(VersionRange(4, 6), VersionRange(0, 3)) is None  # node too old
    assert usable_version(None, VersionRange(0, 3)) is None


def test_negotiate_keeps_only_apis_both_sides_know() -> None:
    ours = {0: VersionRange(0, 11), 3: VersionRange(0, 12)}
    theirs = {0: VersionRange(3, 9), 3: VersionRange(0, 12), 999: VersionRange(0, 1)}
    assert negotiate(ours, theirs) == {0: 9, 3: 12}


def test_version_for_raises_a_clear_error_below_the_needed_minimum() -> None:
    versions = NegotiatedVersions.from_broker({ApiKey.METADATA: VersionRange(0, 0)},
                                              {ApiKey.METADATA: VersionRange(0, 12)})
    assert versions.version_for(ApiKey.METADATA) == 0
    with pytest.raises(UnsupportedVersionError, match="Metadata .*broker versions: 0 to 0; needed at least 1"):
        versions.version_for(ApiKey.METADATA, minimum=1)
    with pytest.raises(UnsupportedVersionError, match="CreateTopics .*broker versions: none"):
        versions.version_for(ApiKey.CREATE_TOPICS)


def test_client_versions_leave_out_unstable_latest_versions() -> None:
    ours = client_versions()
    assert ours[ApiKey.API_VERSIONS] == VersionRange(0, 4)
    assert ours[ApiKey.END_TXN].max == 5  # stable in 4.2's spec
    assert ours[ApiKey.INIT_PRODUCER_ID].max == 5  # InitProducerId v6 (KIP-939) is marked unstable in 4.2


def test_the_version_table_agrees_with_the_message_classes() -> None:
    """client_versions reads the generated table instead of importing every message class: same ranges."""
    from pybroker.client.versions import VersionRange, client_versions
    from pybroker.protocol.messages import REQUEST_CLASSES

    assert client_versions() == {
        key: VersionRange(cls.MIN_VERSION, cls.MAX_VERSION - (1 if cls.LATEST_VERSION_UNSTABLE else 0))
        for key, cls in REQUEST_CLASSES.items()}
