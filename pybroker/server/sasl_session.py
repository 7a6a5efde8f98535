"""Kafka's SASL state machine on one connection (SaslServerAuthenticator plus KIP-368 re-authentication).

States, per connection of a SASL_PLAINTEXT or SASL_SSL listener:

    HANDSHAKE     ApiVersions and SaslHandshake only (also while re-authenticating)
    AUTHENTICATE  after a v1 SaslHandshake: SaslAuthenticate only
    RAW           after a v0 SaslHandshake: the next frames are bare SASL tokens, answered bare
    COMPLETE      every request; a SaslHandshake starts re-authentication; once the session
                  lifetime has passed, any other request closes the connection
    FAILED        the connection is closing

A request the state does not admit is answered ILLEGAL_SASL_STATE (where its answer has a
top-level error code) and the connection closes. Kafka closes without an answer before the
handshake; answering then costs nothing and tells a misconfigured client what happened. Frames
larger than ``sasl.server.max.receive.size`` before authentication close the connection.

`SaslAuthenticator` is the broker-wide part: the mechanisms enabled per listener, their user
databases (JAAS options for PLAIN, the SCRAM credential store), OAUTHBEARER's token validator
and the timing keys.
"""

from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from pybroker.client.sasl import SaslCredentials
from pybroker.common.clock import Clock
from pybroker.common.config import CONFIG_KEYS, LISTENER_PREFIX, BrokerConfig, ConfigError, parse_value
from pybroker.protocol.api_keys import ApiKey
from pybroker.security.principal import USER_TYPE, KafkaPrincipal
from pybroker.security.sasl import SaslAuthenticationError, SaslError, SaslServer
from pybroker.security.sasl.jaas import JaasConfigError, jaas_config_for, plain_users
from pybroker.security.sasl.oauthbearer import MECHANISM as OAUTHBEARER
from pybroker.security.sasl.oauthbearer import OAuthBearerServer, TokenValidator, UnsecuredValidator
from pybroker.security.sasl.plain import MECHANISM as PLAIN
from pybroker.security.sasl.plain import PlainServer
from pybroker.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from pybroker.security.sasl.scram import ScramCredential, ScramServer

if TYPE_CHECKING:
    from pybroker.controller.scram_store import ScramCredentialStore
    from pybroker.security.sasl.jwt_validator import KeySet

SUPPORTED = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)
_VALIDATOR_CLASS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
_UNSECURED_CLASS = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                    "OAuthBearerUnsecuredValidatorCallbackHandler")
_OAUTH_KEYS = ("jwks.endpoint.url", "jwks.endpoint.refresh.ms", "jwks.endpoint.retry.backoff.ms",
               "expected.audience", "expected.issuer", "sub.claim.name", "scope.claim.name", "clock.skew.seconds")
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW = "raw"
    COMPLETE = "complete"
    FAILED = "failed"


def listener_value(config: BrokerConfig, listener: str, key: str) -> Any:
    """A key's value for one listener: ``listener.name.<listener>.<key>`` over the key itself."""
    prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
    if prefixed in config.raw:
        return parse_value(prefixed, CONFIG_KEYS[key], config.raw[prefixed])
    return config[key]


def mechanism_value(config: BrokerConfig, listener: str, mechanism: str, key: str) -> tuple[str, Any]:
    """(the key that set it, value): ``listener.name.<l>.<mechanism>.<key>`` over ``listener_value``."""
    prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.{key}"
    if prefixed in config.raw:
        return prefixed, parse_value(prefixed, CONFIG_KEYS[key], config.raw[prefixed])
    if f"{LISTENER_PREFIX}{listener.lower()}.{key}" in config.raw:
        return f"{LISTENER_PREFIX}{listener.lower()}.{key}", listener_value(config, listener, key)
    return key, config[key]


@dataclass(frozen=True)
class ListenerSasl:
    """One SASL listener's settings, checked at start-up."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]
    reauth_ms: int
    max_receive_size: int
    oauth: TokenValidator | None = None


class SaslAuthenticator:
    def __init__(self, config: BrokerConfig, credentials: Callable[[], "ScramCredentialStore | None"],
                 clock: Clock) -> None:
        """ConfigError (one line naming the key) for a mechanism pybroker lacks or PLAIN without users."""
        self._credentials = credentials
        self.clock = clock  # token expiry and the failed-authentication delay
        self._secret = secrets.token_bytes(32)  # seeds unknown users' fake SCRAM credentials
        self.failed_delay_ms: int = config["connection.failed.authentication.delay.ms"]
        self._key_sets: dict[str, KeySet] = {}  # one per JWKS location, shared by listeners
        self.listeners: dict[str, ListenerSasl] = {
            endpoint.listener: self._listener(config, endpoint.listener)
            for endpoint in config.listener_set.bound if endpoint.security_protocol in SASL_PROTOCOLS}
        self.inter_broker = self._inter_broker(config)

    def _inter_broker(self, config: BrokerConfig) -> SaslCredentials | None:
        """What this broker authenticates with on the inter-broker listener: the mechanism of
        ``sasl.mechanism.inter.broker.protocol`` and the username/password options of that
        listener's JAAS config for it (Kafka's login context for the mechanism)."""
        listener = config.listener_set.inter_broker
        settings = self.listeners.get(listener)
        if settings is None:
            return None
        mechanism = config["sasl.mechanism.inter.broker.protocol"]
        if mechanism == OAUTHBEARER:
            raise ConfigError("Invalid value OAUTHBEARER for configuration sasl.mechanism.inter.broker.protocol: "
                              "pybroker's brokers log in to each other with PLAIN or SCRAM only")
        if mechanism not in settings.mechanisms:
            raise ConfigError(f"Invalid value {mechanism} for configuration sasl.mechanism.inter.broker.protocol: "
                              f"sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms "
                              f"when SASL is used for inter-broker communication")
        try:
            entry = jaas_config_for(config.raw, listener, mechanism)
        except JaasConfigError as exc:
            raise ConfigError(str(exc)) from None
        options = entry.options if entry is not None else {}
        if "username" not in options or "password" not in options:
            raise ConfigError(f"Missing configuration listener.name.{listener.lower()}.{mechanism.lower()}"
                              f".sasl.jaas.config: the inter-broker listener {listener} needs username=\"...\" "
                              f"password=\"...\" for {mechanism}")
        return SaslCredentials(mechanism, options["username"], options["password"])

    def _listener(self, config: BrokerConfig, listener: str) -> ListenerSasl:
        mechanisms = tuple(listener_value(config, listener, "sasl.enabled.mechanisms"))
        key = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
        for mechanism in mechanisms:
            if mechanism not in SUPPORTED:
                raise ConfigError(f"Invalid value {','.join(mechanisms)} for configuration {key}: SASL mechanism "
                                  f"{mechanism} is not supported by pybroker (supported: {', '.join(SUPPORTED)})")
        if not mechanisms:
            raise ConfigError(f"Invalid value for configuration {key}: no SASL mechanism enabled on listener "
                              f"{listener}")
        users: dict[str, str] = {}
        if PLAIN in mechanisms:
            try:
                users = plain_users(jaas_config_for(config.raw, listener, PLAIN))
            except JaasConfigError as exc:
                raise ConfigError(str(exc)) from None
            if not users:
                raise ConfigError(f"Missing configuration listener.name.{listener.lower()}.plain.sasl.jaas.config: "
                                  f"PLAIN is enabled on listener {listener} but no user_<name>=\"<password>\" "
                                  "option is set")
        oauth = self._oauth_validator(config, listener) if OAUTHBEARER in mechanisms else None
        return ListenerSasl(mechanisms, users, listener_value(config, listener, "connections.max.reauth.ms"),
                            listener_value(config, listener, "sasl.server.max.receive.size"), oauth)

    def _oauth_validator(self, config: BrokerConfig, listener: str) -> TokenValidator:
        """Kafka's validator choice: the callback handler class, else (pybroker) JWT when a JWKS URL is
        set, else the unsecured validator with its JAAS options."""
        class_key, handler = mechanism_value(config, listener, OAUTHBEARER, "sasl.server.callback.handler.class")
        lookup = {name: mechanism_value(config, listener, OAUTHBEARER, f"sasl.oauthbearer.{name}")
                  for name in _OAUTH_KEYS}
        url_key, url = lookup["jwks.endpoint.url"]
        if handler not in (None, _VALIDATOR_CLASS, _UNSECURED_CLASS):
            raise ConfigError(f"Invalid value {handler} for configuration {class_key}: pybroker has Kafka's "
                              f"{_VALIDATOR_CLASS} and {_UNSECURED_CLASS} only")
        if handler == _VALIDATOR_CLASS or (handler is None and url):
            if not url:
                raise ConfigError(f"Missing configuration {url_key}: {_VALIDATOR_CLASS} needs a JWKS endpoint")
            from pybroker.security.sasl.jwt_validator import JwtValidator, KeySet, jwt_settings  # PyJWT: ~25 ms

            settings = jwt_settings({name: value for name, (_, value) in lookup.items()})
            if url not in self._key_sets:
                try:
                    self._key_sets[url] = KeySet(url, settings.refresh_ms, settings.retry_backoff_ms)
                except ValueError as exc:
                    raise ConfigError(f"Invalid value {url} for configuration {url_key}: {exc}") from None
            return JwtValidator(settings, self._key_sets[url])
        try:
            entry = jaas_config_for(config.raw, listener, OAUTHBEARER)
        except JaasConfigError as exc:
            raise ConfigError(str(exc)) from None
        try:
            return UnsecuredValidator.from_options(entry.options if entry is not None else {})
        except ValueError as exc:
            raise ConfigError(f"Invalid value for configuration listener.name.{listener.lower()}.oauthbearer"
                              f".sasl.jaas.config: {exc}") from None

    def session(self, listener: str) -> "SaslSession | None":
        settings = self.listeners.get(listener)
        return SaslSession(self, settings) if settings is not None else None

    def server(self, settings: ListenerSasl, mechanism: str) -> SaslServer:
        if mechanism == PLAIN:
            return PlainServer(settings.plain_users.get)
        if mechanism == OAUTHBEARER:
            assert settings.oauth is not None
            return OAuthBearerServer(settings.oauth, self.clock.wall_ms)
        scram = SCRAM_MECHANISMS[mechanism]
        return ScramServer(scram, lambda user: self._scram_credential(user, mechanism), self._secret)

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        store = self._credentials()
        text = store.user_config(user).get(mechanism) if store is not None else None
        try:
            return ScramCredential.from_text(text) if text else None
        except ValueError:
            return None


# What each state admits besides the exchange itself.
_BEFORE_AUTH = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE})


@dataclass(eq=False)
class SaslSession:
    """One connection's SASL progress; owned by the connection's ConnectionSession."""

    authenticator: SaslAuthenticator
    settings: ListenerSasl
    state: SaslState = SaslState.HANDSHAKE
    mechanism: str | None = None
    principal: KafkaPrincipal | None = None
    expires_at_ms: int | None = None  # when the authenticated session ends (KIP-368)
    client_reauthenticates: bool = False  # it sent SaslAuthenticate v1+
    _server: SaslServer | None = field(default=None, repr=False)
    _previous: KafkaPrincipal | None = field(default=None, repr=False)

    @property
    def authenticated(self) -> bool:
        return self.principal is not None and self.state is not SaslState.FAILED

    def admits(self, api_key: int, now_ms: int) -> bool:
        """Whether a request of `api_key` may be served now; False: refuse it and close."""
        state = self.state
        if state is SaslState.COMPLETE:
            if api_key == ApiKey.SASL_HANDSHAKE:
                return True
            return self.expires_at_ms is None or now_ms < self.expires_at_ms
        if state is SaslState.HANDSHAKE:
            return api_key in _BEFORE_AUTH
        return state is SaslState.AUTHENTICATE and api_key == ApiKey.SASL_AUTHENTICATE

    def frame_too_large(self, size: int) -> bool:
        return self.state is not SaslState.COMPLETE and size > self.settings.max_receive_size

    def handshake(self, mechanism: str, version: int) -> bool:
        """SaslHandshake: False for a mechanism not enabled on this listener (the connection closes)."""
        if mechanism not in self.settings.mechanisms:
            self.state = SaslState.FAILED
            return False
        if self.state is SaslState.COMPLETE:  # KIP-368 re-authentication
            self._previous, self.principal = self.principal, None
        self.mechanism = mechanism
        self._server = self.authenticator.server(self.settings, mechanism)
        self.state = SaslState.AUTHENTICATE if version >= 1 else SaslState.RAW
        return True

    def authenticate(self, token: bytes, version: int, now_ms: int) -> tuple[bytes, int]:
        """One token of the exchange: (answer, session lifetime in ms, 0 while unfinished or unlimited).
        Raises SaslAuthenticationError with the message the client gets; the state is then FAILED."""
        server = self._server
        assert server is not None and self.mechanism is not None
        self.client_reauthenticates |= version > 0
        try:
            answer = server.evaluate(token)
            if not server.complete:
                return answer, 0
            principal = KafkaPrincipal(USER_TYPE, server.authorization_id)
            if self._previous is not None and principal != self._previous:
                raise SaslAuthenticationError(f"Cannot change principals during re-authentication from "
                                              f"{self._previous}: {principal}")
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            raise
        except SaslError:
            self.state = SaslState.FAILED
            doing = "re-authentication" if self._previous is not None else "authentication"
            raise SaslAuthenticationError(f"Authentication failed during {doing} due to invalid credentials with "
                                          f"SASL mechanism {self.mechanism}") from None
        self.principal, self._previous, self._server = principal, None, None
        self.state = SaslState.COMPLETE
        lifetime = self._lifetime(server, now_ms)
        self.expires_at_ms = now_ms + lifetime if lifetime else None
        return answer, lifetime

    def _lifetime(self, server: SaslServer, now_ms: int) -> int:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: the shorter of
        connections.max.reauth.ms and the credential's own expiry; 0 when neither applies."""
        limits = [self.settings.reauth_ms] if self.settings.reauth_ms > 0 else []
        if server.session_expiry_ms is not None:
            limits.append(max(server.session_expiry_ms - now_ms, 1))
        return min(limits) if limits else 0
