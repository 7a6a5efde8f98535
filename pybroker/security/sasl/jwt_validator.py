"""OAUTHBEARER tokens checked against a JSON Web Key Set (Kafka's BrokerJwtValidator, with PyJWT).

Settings (Kafka's ``sasl.oauthbearer.*`` keys): ``jwks.endpoint.url`` (``file://`` or ``http(s)://``),
``expected.audience`` (list; the token's ``aud`` must hold one), ``expected.issuer``,
``sub.claim.name`` (``sub``), ``scope.claim.name`` (``scope``), ``clock.skew.seconds`` (30),
``jwks.endpoint.refresh.ms`` (1 h) and ``jwks.endpoint.retry.backoff.ms``.

Checks, as Kafka's: a signature by a key of the set (``alg`` ``none`` refused), ``exp`` and ``iat``
present, finite and within a long of milliseconds (jose4j's NumericDate), and ``exp`` not past (with
the clock skew; like jose4j, ``iat`` is not compared with now), ``aud`` and ``iss`` when configured,
and a non-blank subject claim.

The key set is read before the broker serves (a file at once; a URL fetched, and retried in the
background if the endpoint does not answer) and re-read on a background thread every refresh
interval, a file also when it changes. A token whose ``kid`` is not in the set fails and schedules
an early refresh, as Kafka's RefreshingHttpsJwksVerificationKeyResolver does, so the event loop
never waits for the identity provider.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

import jwt

from pybroker.security.sasl.oauthbearer import InvalidToken, ValidToken, time_claim, token_scope

log = logging.getLogger("pybroker.security")
FETCH_TIMEOUT_S = 10.0
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


@dataclass(frozen=True)
class JwtSettings:
    jwks_url: str
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    refresh_ms: int = 3_600_000
    retry_backoff_ms: int = 100


class KeySet:
    """The keys of one JWKS location, by ``kid``; swapped whole when re-read, so readers need no lock."""

    def __init__(self, url: str, refresh_ms: int, retry_backoff_ms: int) -> None:
        """ValueError for a URL that is neither file:// nor http(s)://, or an unreadable file."""
        parsed = urlparse(url)
        if parsed.scheme not in ("file", "http", "https"):
            raise ValueError(f"{url} is not a file://, http:// or https:// URL")
        self.url = url
        self._path = Path(parsed.path) if parsed.scheme == "file" else None
        self._refresh_s = refresh_ms / 1000
        self._backoff_s = max(retry_backoff_ms, 1) / 1000
        self._keys: dict[str | None, list[dict[str, Any]]] = {}
        self._mtime = 0.0
        self._wake = threading.Event()
        self._last_early = 0.0
        if self._path is not None:
            try:
                self._load_file()
            except (OSError, ValueError) as exc:
                raise ValueError(f"cannot read the JWKS file {self._path}: {exc}") from None
        else:
            try:
                self._keys = self._parse(self._fetch())
            except (OSError, ValueError) as exc:
                log.warning("JWKS endpoint %s did not answer (%s); retrying in the background", url, exc)
        threading.Thread(target=self._refresher, name="pybroker-jwks", daemon=True).start()

    def candidates(self, kid: str | None) -> list[dict[str, Any]]:
        if self._path is not None:
            self._reload_if_changed()
        found = self._keys.get(kid) if kid is not None else [k for keys in self._keys.values() for k in keys]
        if not found:
            self.refresh_soon()
        return found or []

    def refresh_soon(self) -> None:
        """An unknown key id: refresh now, at most once per backoff interval."""
        now = time.monotonic()
        if now - self._last_early >= self._backoff_s:
            self._last_early = now
            self._wake.set()

    def _refresher(self) -> None:
        while True:
            self._wake.wait(self._refresh_s if self._keys else self._backoff_s)
            self._wake.clear()
            try:
                if self._path is not None:
                    self._load_file()
                else:
                    self._keys = self._parse(self._fetch())
            except (OSError, ValueError) as exc:
                log.warning("Cannot refresh the JWKS from %s: %s", self.url, exc)

    def _fetch(self) -> bytes:
        with urllib.request.urlopen(self.url, timeout=FETCH_TIMEOUT_S) as answer:  # noqa: S310 (scheme checked)
            return answer.read(4 * 1024 * 1024)

    def _load_file(self) -> None:
        assert self._path is not None
        mtime = self._path.stat().st_mtime
        self._keys = self._parse(self._path.read_bytes())
        self._mtime = mtime

    def _reload_if_changed(self) -> None:
        try:
            if self._path is not None and self._path.stat().st_mtime != self._mtime:
                self._load_file()
        except (OSError, ValueError) as exc:
            log.warning("Cannot re-read the JWKS file %s: %s", self._path, exc)

    @staticmethod
    def _parse(data: bytes) -> dict[str | None, list[dict[str, Any]]]:
        document = json.loads(data)
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise ValueError("not a JSON Web Key Set (no \"keys\" list)")
        keys: dict[str | None, list[dict[str, Any]]] = {}
        for key in document["keys"]:
            if isinstance(key, dict) and key.get("kty") in ("RSA", "EC", "OKP") and key.get("use", "sig") == "sig":
                keys.setdefault(key.get("kid"), []).append(key)
        return keys


class JwtValidator:
    def __init__(self, settings: JwtSettings, keys: KeySet) -> None:
        self.settings = settings
        self._keys = keys

    def validate(self, token: str, now_ms: int) -> ValidToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"Could not validate the access token: {exc}") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm[:2] not in _KEY_TYPES:
            raise InvalidToken(f"Could not validate the access token: algorithm {algorithm!r} is not allowed")
        claims = self._verified_claims(token, header.get("kid"), algorithm)
        subject = claims.get(self.settings.sub_claim)
        if not isinstance(subject, str) or not subject.strip():
            raise InvalidToken(f"The {self.settings.sub_claim} claim is missing or blank")
        time_claim(claims, "iat")
        expires = time_claim(claims, "exp")
        assert expires is not None  # required by the decoding
        return ValidToken(subject, int(expires * 1000), token_scope(claims, self.settings.scope_claim), claims)

    def _verified_claims(self, token: str, kid: str | None, algorithm: str) -> Mapping[str, Any]:
        """PyJWT checks the times against the system clock, the one `now_ms` of validate() comes from."""
        candidates = [key for key in self._keys.candidates(kid)
                      if key["kty"] == _KEY_TYPES[algorithm[:2]] and key.get("alg", algorithm) == algorithm]
        if not candidates:
            raise InvalidToken(f"Could not validate the access token: no key with kid {kid!r} for {algorithm} in "
                               f"the JWKS of {self._keys.url}")
        settings = self.settings
        failure: Exception | None = None
        for data in candidates:
            try:
                return jwt.decode(token, jwt.PyJWK(data, algorithm),
                                  audience=list(settings.expected_audience) or None,
                                  issuer=settings.expected_issuer, leeway=settings.clock_skew_s,
                                  options={"require": ["exp", "iat"], "verify_aud": bool(settings.expected_audience),
                                           "verify_iat": False})
            except (jwt.PyJWTError, ValueError, TypeError, OverflowError) as exc:  # int(inf) overflows in PyJWT
                failure = exc
        raise InvalidToken(f"Could not validate the access token: {failure}")


def jwt_settings(lookup: Mapping[str, Any]) -> JwtSettings:
    """From a listener's resolved ``sasl.oauthbearer.*`` values (keys without the prefix)."""
    return JwtSettings(lookup["jwks.endpoint.url"], tuple(lookup.get("expected.audience") or ()),
                       lookup.get("expected.issuer") or None, lookup.get("sub.claim.name") or "sub",
                       lookup.get("scope.claim.name") or "scope", int(lookup.get("clock.skew.seconds", 30)),
                       int(lookup.get("jwks.endpoint.refresh.ms", 3_600_000)),
                       int(lookup.get("jwks.endpoint.retry.backoff.ms", 100)))
