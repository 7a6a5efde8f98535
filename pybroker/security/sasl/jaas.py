"""Kafka's JAAS-style ``sasl.jaas.config`` values and which one applies to a listener and mechanism.

Grammar (Kafka's JaasConfig, one login module per value):

    <login module class> required|requisite|sufficient|optional <key>=<value> ... ;

Values are double-quoted strings (``\\"`` and ``\\\\`` escapes) or bare words. The broker reads
``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (both lower case), then the unprefixed
``sasl.jaas.config``, as Kafka does for a listener's login context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<word>[^\s=;"]+)|(?P<punct>[=;]))')


class JaasConfigError(ValueError):
    """A value that is not a JAAS login module configuration; the message names the problem."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise JaasConfigError(f"Unexpected character at position {position} of JAAS config")
        position = match.end()
        if match["quoted"] is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", match["quoted"])))
        elif match["word"] is not None:
            tokens.append(("value", match["word"]))
        else:
            tokens.append((match["punct"], match["punct"]))
    return tokens


def parse_jaas_config(text: str) -> JaasEntry:
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[-1][0] != ";":
        raise JaasConfigError("JAAS config entry not terminated by semi-colon")
    if tokens[0][0] != "value" or tokens[1][0] != "value":
        raise JaasConfigError("JAAS config must start with a login module and a control flag")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in FLAGS:
        raise JaasConfigError(f"Invalid control flag {tokens[1][1]} in JAAS config")
    options: dict[str, str] = {}
    body = tokens[2:-1]
    if any(kind == ";" for kind, _ in body):
        raise JaasConfigError("JAAS config property contains 2 login modules, should be 1 module")
    if len(body) % 3:
        raise JaasConfigError("Invalid JAAS config: options must be key=value")
    for index in range(0, len(body), 3):
        (key_kind, key), (eq, _), (value_kind, value) = body[index:index + 3]
        if key_kind != "value" or eq != "=" or value_kind != "value":
            raise JaasConfigError("Invalid JAAS config: options must be key=value")
        options[key] = value
    return JaasEntry(module, flag, options)


def jaas_config_for(raw: Mapping[str, str], listener: str | None, mechanism: str) -> JaasEntry | None:
    """The login module configuration of `mechanism` on `listener` (None = a client's own config)."""
    keys = ["sasl.jaas.config"]
    if listener is not None:
        keys.insert(0, f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
    for key in keys:
        if raw.get(key):
            try:
                return parse_jaas_config(raw[key])
            except JaasConfigError as exc:
                raise JaasConfigError(f"Invalid value for configuration {key}: {exc}") from None
    return None


def plain_users(entry: JaasEntry | None) -> dict[str, str]:
    """PLAIN's user database: the ``user_<name>="<password>"`` options (PlainServerCallbackHandler)."""
    if entry is None:
        return {}
    return {key[5:]: value for key, value in entry.options.items() if key.startswith("user_")}
