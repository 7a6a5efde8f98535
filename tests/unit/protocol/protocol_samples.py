"""Deterministic pseudo-random sample objects for every generated message class.

Values respect each field's presence, nullability and taggedness at the given
version, so ``encode -> decode`` must reproduce the sample exactly.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from typing import Any

from pybroker.protocol import messages
from pybroker.protocol.schema import FieldSpec, Message, is_flexible, resolve_struct

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
_ALPHABET = "abcxyz-_.09 éü€漢字𝄞"


def all_message_classes() -> list[type[Message]]:
    """Every generated top-level message class, sorted by name."""
    return sorted((getattr(messages, n) for n in messages._MODULE_OF), key=lambda c: c.__name__)


def all_cases() -> list[tuple[type[Message], int]]:
    """``(class, version)`` for every valid version of every message."""
    return [(c, v) for c in all_message_classes() for v in range(c.MIN_VERSION, c.MAX_VERSION + 1)]


def _in(rng: tuple[int, int] | None, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def _defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        else:
            out[f.name] = f.default_factory()  # type: ignore[misc]
    return out


def sample(cls: type, version: int, rnd: random.Random, null_rate: float = 0.25,
           depth: int = 0) -> Any:
    """A populated instance of ``cls`` valid at ``version``."""
    flexible = is_flexible(cls, version)
    defaults = _defaults(cls)
    kw: dict[str, Any] = {}
    spec: FieldSpec
    for spec in cls._SCHEMA:  # type: ignore[attr-defined]
        if not _in(spec.versions, version):
            continue
        nullable = _in(spec.nullable, version)
        tagged = flexible and spec.tag is not None and _in(spec.tagged, version)
        default = defaults[spec.name]
        for _ in range(20):
            value = _value(cls, spec.type, nullable, version, rnd,
                           0.0 if tagged else null_rate, depth)
            if not tagged or value != default:
                break
        else:  # pragma: no cover - would mean a generator bug
            raise AssertionError(f"could not build a non-default value for {spec}")
        kw[spec.name] = value
    return cls(**kw)


def _value(owner: type, typ: str, nullable: bool, version: int, rnd: random.Random,
           null_rate: float, depth: int) -> Any:
    if nullable and rnd.random() < null_rate:
        return None
    if typ in _INT_RANGES:
        lo, hi = _INT_RANGES[typ]
        return rnd.choice([lo, hi, 0, -1 if lo < 0 else 1, rnd.randint(lo, hi)])
    if typ == "bool":
        return rnd.random() < 0.5
    if typ == "float64":
        return rnd.choice([0.0, -1.5, rnd.uniform(-1e9, 1e9)])
    if typ == "string":
        return "".join(rnd.choice(_ALPHABET) for _ in range(rnd.randint(1, 8)))
    if typ in ("bytes", "records"):
        return rnd.randbytes(rnd.randint(1, 12))
    if typ == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128))
    if typ.startswith("[]"):
        n = rnd.randint(1, 2) if depth < 4 else 0
        return [_value(owner, typ[2:], False, version, rnd, null_rate, depth + 1)
                for _ in range(n)]
    scls = resolve_struct(owner, typ)
    return sample(scls, version, rnd, null_rate, depth + 1)
