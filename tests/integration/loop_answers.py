"""Whether a broker's event loop stays free while it does a long piece of work: another connection's
ApiVersions requests, sent one after another, are counted until the work's own signal arrives (an answer on
another socket). Ordering alone, no timing: a loop held by blocking file work answers none of them meanwhile."""

from __future__ import annotations

import select
import time
from dataclasses import dataclass, field
from typing import Callable

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from tests.integration.test_bad_input import WireClient


@dataclass
class Answers:
    count: int = 0
    longest_ms: float = 0.0
    """The longest round trip: for failure messages and reports, never asserted (tests assert no times)."""
    observed: list[tuple[int, int]] = field(default_factory=list)
    """Per answer, what the caller's ``observe`` gave just before the request was sent and just after its answer."""


def answered(client: WireClient) -> bool:
    """An answer is waiting on ``client``'s socket (or already read)."""
    return bool(client.frames) or bool(select.select([client.sock], [], [], 0)[0])


def api_versions_until_answered(pinger: WireClient, awaited: WireClient,
                                observe: Callable[[], int] = lambda: 0) -> Answers:
    """ApiVersions on ``pinger``, one after another, until an answer is waiting on ``awaited``."""
    return api_versions_until(pinger, lambda: answered(awaited), observe)


def api_versions_until(pinger: WireClient, done: Callable[[], bool], observe: Callable[[], int] = lambda: 0,
                       at_most: int = 100_000) -> Answers:
    """ApiVersions on ``pinger``, one after another, until ``done()`` (at most ``at_most``: a bound on a wait
    for the broker, never a synchronization)."""
    answers = Answers()
    while not done():
        assert answers.count < at_most, f"not done after {answers.count} ApiVersions"
        before = observe()
        sent = time.monotonic()
        version = pinger.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                                 ApiVersionsResponse)
        answers.longest_ms = max(answers.longest_ms, (time.monotonic() - sent) * 1000)
        assert version.error_code == ErrorCode.NONE
        answers.count += 1
        answers.observed.append((before, observe()))
    return answers
