"""SaslHandshake (17, v0-1) and SaslAuthenticate (36, v0-2): the broker side of SASL.

The connection's `SaslSession` (sasl_session.py) holds the state; these handlers feed it. A
failed exchange is answered only after ``connection.failed.authentication.delay.ms`` (Kafka's
KIP-306 delay, so guessing passwords is slow) and the connection is then closed. Both APIs on a
connection of a listener without SASL answer ILLEGAL_SASL_STATE, as Kafka's do once a
connection is authenticated by other means; so does a SaslAuthenticate after a completed exchange
that no SaslHandshake reopened (Kafka's KafkaApis), and the connection stays open.
"""

from __future__ import annotations

import logging

from pybroker.common.log_limit import LogLimiter
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pybroker.security.sasl import SaslAuthenticationError
from pybroker.server.context import RequestContext
from pybroker.server.registry import api
from pybroker.server.sasl_session import SaslState

limited_log = LogLimiter(logging.getLogger("pybroker.server"))


@api(ApiKey.SASL_HANDSHAKE, 0, 1)
async def handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    sasl = ctx.session.sasl
    if sasl is None:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    mechanisms = list(sasl.settings.mechanisms)
    if not sasl.handshake(request.mechanism, ctx.api_version):
        await failed(ctx, f"SASL mechanism '{request.mechanism}' requested by client is not supported")
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms)
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=mechanisms)


@api(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def authenticate(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    sasl = ctx.session.sasl
    if sasl is None or sasl.state is SaslState.COMPLETE:
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, auth_bytes=b"",
                                        error_message="SaslAuthenticate request received after successful "
                                                      "authentication")
    try:
        answer, lifetime = sasl.authenticate(bytes(request.auth_bytes), ctx.api_version, ctx.now_ms)
    except SaslAuthenticationError as exc:
        await failed(ctx, str(exc))
        return SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                                        auth_bytes=b"")
    if sasl.principal is not None:
        ctx.session.principal = sasl.principal
    return SaslAuthenticateResponse(error_code=ErrorCode.NONE, auth_bytes=answer, session_lifetime_ms=lifetime)


async def failed(ctx: RequestContext, message: str) -> None:
    """Log, wait out the failed-authentication delay, and have the connection closed after the answer."""
    sasl = ctx.session.sasl
    assert sasl is not None
    limited_log.log(logging.INFO, "sasl-failed", "Failed authentication with %s (%s)", ctx.client_host, message)
    ctx.session.close_after_response = True
    if sasl.authenticator.failed_delay_ms > 0:
        await sasl.authenticator.clock.sleep(sasl.authenticator.failed_delay_ms / 1000)
