"""The dispatcher's SASL checks, kept out of the dispatcher: what a SASL connection may send before
it is authenticated (sasl_session.py has the states), and the v0 exchange of bare tokens.

A refused request closes the connection after its answer: the dispatcher returns that answer as a
``FinalResponse``, which the connection writes in its turn and then closes.
"""

from __future__ import annotations

import logging
import struct

from pybroker.common.log_limit import LogLimiter
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol import messages
from pybroker.protocol.schema import Message
from pybroker.security.sasl import SaslAuthenticationError
from pybroker.server.context import ConnectionSession
from pybroker.server.request_channel import CloseConnection
from pybroker.server.sasl_session import SaslAuthenticator, SaslState

limited_log = LogLimiter(logging.getLogger("pybroker.server"))
#: answered before the broker's start-up finished, like ApiVersions: they need no metadata
BEFORE_START_UP = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


async def before_header(authenticator: SaslAuthenticator, session: ConnectionSession, frame: memoryview,
                        peer: str) -> bytes | None:
    """A SASL connection's frame before it is parsed: the session starts with the first frame;
    before authentication frames are capped at ``sasl.server.max.receive.size``; after a v0
    handshake the frame is a bare token, answered here."""
    if session.sasl is None:
        session.sasl = authenticator.session(session.listener)
    sasl = session.sasl
    if sasl is None or sasl.authenticated:
        return None
    if sasl.state is SaslState.FAILED:
        raise CloseConnection("request after a failed SASL authentication")
    if sasl.frame_too_large(len(frame)):
        raise CloseConnection(f"SASL frame of {len(frame)} bytes before authentication exceeds "
                              f"sasl.server.max.receive.size={sasl.settings.max_receive_size}")
    if sasl.state is SaslState.RAW:
        return await raw_token(session, frame, sasl.authenticator.clock.wall_ms(), peer)
    return None


async def raw_token(session: ConnectionSession, frame: memoryview, now_ms: int, peer: str) -> bytes:
    """A bare SASL token after a v0 SaslHandshake, answered as a bare size-prefixed token. A failure
    has no answer in this framing: after the failed-authentication delay the connection closes."""
    sasl = session.sasl
    assert sasl is not None
    try:
        answer, _ = sasl.authenticate(bytes(frame), 0, now_ms)
    except SaslAuthenticationError as exc:
        limited_log.log(logging.INFO, "sasl-failed", "Failed authentication with %s (%s)", peer, exc)
        await sasl.authenticator.clock.sleep(sasl.authenticator.failed_delay_ms / 1000)
        raise CloseConnection(f"SASL authentication failed: {exc}") from None
    if sasl.principal is not None:
        session.principal = sasl.principal
    return struct.pack(">i", len(answer)) + answer


def refusal(session: ConnectionSession, api_key: int, version: int, request: Message, now_ms: int
            ) -> Message | None:
    """None if the SASL state admits the request; else its ILLEGAL_SASL_STATE answer, the connection
    closing after it. CloseConnection without an answer for an expired session (KIP-368) or a
    response without a top-level error code at ``version`` (Metadata has one from v13 only)."""
    sasl = session.sasl
    if sasl is None or sasl.admits(api_key, now_ms):
        return None
    if sasl.state is SaslState.COMPLETE:
        raise CloseConnection("SASL session expired (connections.max.reauth.ms) without re-authentication")
    sasl.state = SaslState.FAILED
    response = getattr(messages, f"{messages.API_NAMES[api_key]}Response")()  # loads that API's module only
    if not any(spec.name == "error_code" and spec.versions[0] <= version <= spec.versions[1]
               for spec in response._SCHEMA):
        raise CloseConnection(f"{type(request).__name__} before SASL authentication")
    response.error_code = ErrorCode.ILLEGAL_SASL_STATE
    session.close_after_response = True
    return response
