"""Straight-line Python for one struct at one version, built from its compiled field list.

Interpreting a field table costs a Python call per field and a list per object. Here each
``(class, version)`` gets its own ``read(r)`` and ``write(w, obj)``, generated once from the same
decisions the plan took (as ``dataclasses`` generates ``__init__``):

- a run of consecutive fixed-size fields is one ``struct`` (un)pack;
- strings, bytes, records and arrays call their codec directly, a non-nullable string's null check
  is inline;
- the object is built by one constructor call with the defaults of the fields not on the wire;
- a flexible struct with no tagged fields on the wire (the usual case) checks one byte.

Errors keep the interpreter's contract: truncated or malformed input raises ``DecodeError``, a value
that cannot be encoded raises ``EncodeError`` naming the struct, the field(s) and the version.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pybroker.protocol.errors import DecodeError, EncodeError
from pybroker.protocol.primitives import ZERO_UUID, Reader, Writer, uuid_of

Read = Callable[[Reader], Any]
Write = Callable[[Writer, Any], None]

#: struct format character of each fixed-size type; a uuid is 16 raw bytes turned into a UUID after.
FORMATS = {"bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
           "int64": "q", "float64": "d", "uuid": "16s"}

#: Exceptions a field's encoding may raise from a wrong value; each becomes an ``EncodeError``.
ENCODE_FAILURES = (EncodeError, TypeError, ValueError, AttributeError, OverflowError, struct.error)

@dataclass(frozen=True)
class Elements:
    """The elements of a compact array of structs, whose usual case (a count under 127 within the
    bytes left and the decode budget) is generated inline; the array codec takes every other case."""

    read: Read
    write: Write
    min_size: int
    cost: int


@dataclass(frozen=True)
class WireField:
    """One regular (untagged) field as the plan compiled it."""

    name: str
    type: str
    #: the dataclass constructor position its value goes to
    position: int
    nullable: bool
    read: Read
    write: Write
    #: for string/bytes/records: the codec without the null check, which is generated inline instead
    raw_read: Read | None = None
    raw_write: Write | None = None
    elements: Elements | None = None


def _runs(fields: list[WireField]) -> list[list[WireField]]:
    """Consecutive fixed-size fields grouped; every other field alone."""
    groups: list[list[WireField]] = []
    for f in fields:
        if f.type in FORMATS and groups and groups[-1][0].type in FORMATS:
            groups[-1].append(f)
        else:
            groups.append([f])
    return groups


def build_reader(cls: type, fields: list[WireField], flexible: bool, template: tuple[Any, ...],
                 factories: tuple[tuple[int, Callable[[], Any]], ...],
                 read_tagged: Callable[[Reader, list[Any]], None]) -> Read:
    """``read(r)``: decode one ``cls`` from ``r`` and advance ``r.pos``; ``read_tagged(r, values)``
    reads a non-empty tagged-field section into the constructor arguments."""
    ns: dict[str, Any] = {"cls": cls, "struct_error": struct.error, "DecodeError": DecodeError,
                          "uuid_of": uuid_of, "read_tagged": read_tagged}
    # The position lives in the local ``pos`` (and the input's end in ``end``): ``r.pos`` is stored only before a
    # call to another codec or on the way out, and read back after that call.
    lines = ["def read(r):", "    buf = r.buf", "    end = r.end", "    pos = r.pos"]
    values: dict[int, str] = {}
    for g, group in enumerate(_runs(fields)):
        first = group[0]
        if first.type in FORMATS:
            layout = struct.Struct(">" + "".join(FORMATS[f.type] for f in group))
            ns[f"S{g}"] = layout
            names = [f"v{f.position}" for f in group]
            what = f"{cls.__qualname__}.{'/'.join(f.name for f in group)}"
            lines += ["    try:",
                      f"        {', '.join(names)}, = S{g}.unpack_from(buf, pos)",
                      "    except struct_error:",
                      "        r.pos = pos",
                      f"        raise r._fail({what!r}, {layout.size}) from None",
                      f"    pos += {layout.size}"]
            lines += [f"    v{f.position} = uuid_of(v{f.position})" for f in group if f.type == "uuid"]
        elif first.raw_read is not None and not first.nullable:
            ns[f"R{g}"] = first.raw_read
            message = f"non-nullable field {cls.__qualname__}.{first.name} was serialized as null"
            v = f"v{first.position}"
            call = ["r.pos = pos", f"{v} = R{g}(r)", "pos = r.pos"]
            if first.type == "string" and first.raw_read is Reader.read_compact_string:
                # the usual case inline: a length under 127 bytes, valid UTF-8; anything else takes the codec
                lines += ["    stop = pos + buf[pos] if pos < end else 0",
                          "    if pos < stop <= end and buf[pos] < 0x80:", "        try:",
                          f"            {v} = str(buf[pos + 1:stop], 'utf-8')", "        except UnicodeDecodeError:",
                          *(f"            {line}" for line in call), "        else:", "            pos = stop",
                          "    else:", *(f"        {line}" for line in call)]
            else:
                lines += [f"    {line}" for line in call]
            lines += [f"    if {v} is None:", "        r.pos = pos", f"        raise DecodeError({message!r})"]
        elif first.elements is not None:
            ns[f"R{g}"], ns[f"E{g}"] = first.read, first.elements.read
            v, size, cost = f"v{first.position}", first.elements.min_size, first.elements.cost
            lines += ["    n = buf[pos] - 1 if pos < end and buf[pos] < 0x80 else -2",
                      f"    if n >= 0 and n * {size} <= end - pos - 1 and n * {cost} <= r.budget:",
                      "        r.pos = pos + 1", f"        r.budget -= n * {cost}",
                      f"        {v} = [E{g}(r) for _ in range(n)]", "    else:", "        r.pos = pos",
                      f"        {v} = R{g}(r)", "    pos = r.pos"]
        else:
            ns[f"R{g}"] = first.read
            lines += ["    r.pos = pos", f"    v{first.position} = R{g}(r)", "    pos = r.pos"]
        values.update((f.position, f"v{f.position}") for f in group)
    made = dict(factories)
    args = []
    for i, default in enumerate(template):
        if i in values:
            args.append(values[i])
        elif i in made:
            ns[f"F{i}"] = made[i]
            args.append(f"F{i}()")
        else:
            ns[f"D{i}"] = default
            args.append(f"D{i}")
    construct = f"cls({', '.join(args)})"
    if flexible:
        lines += ["    if pos < end and buf[pos] == 0:",
                  "        r.pos = pos + 1",
                  f"        return {construct}",
                  "    r.pos = pos",
                  f"    values = [{', '.join(args)}]",
                  "    read_tagged(r, values)",
                  "    return cls(*values)"]
    else:
        lines += ["    r.pos = pos", f"    return {construct}"]
    return _define("read", lines, ns, cls)


def build_writer(cls: type, version: int, fields: list[WireField], flexible: bool,
                 tagged_defaults: dict[str, Any], write_tagged: Callable[[Writer, Any], None]) -> Write:
    """``write(w, obj)``: append ``obj``'s encoding. ``tagged_defaults`` names the tagged fields at this
    version and their defaults: while every one holds its default the section is one zero byte,
    otherwise ``write_tagged(w, obj)`` writes it."""
    ns: dict[str, Any] = {"ZERO_UUID": ZERO_UUID, "EncodeError": EncodeError, "FAILURES": ENCODE_FAILURES,
                          "write_tagged": write_tagged}
    body: list[str] = []
    for g, group in enumerate(_runs(fields)):
        first = group[0]
        body.append(f"f = {'/'.join(f.name for f in group)!r}")
        if first.type in FORMATS:
            ns[f"S{g}"] = struct.Struct(">" + "".join(FORMATS[f.type] for f in group))
            # a UUID's bytes without its ``bytes`` property, a Python call per field
            values = [f"(obj.{f.name} or ZERO_UUID).int.to_bytes(16, 'big')" if f.type == "uuid" else f"obj.{f.name}"
                      for f in group]
            body.append(f"buf += S{g}.pack({', '.join(values)})")
        elif first.raw_write is not None and not first.nullable:
            ns[f"W{g}"] = first.raw_write
            message = f"field {cls.__qualname__}.{first.name} is not nullable in this version"
            body += [f"v = obj.{first.name}", "if v is None:", f"    raise EncodeError({message!r})", f"W{g}(w, v)"]
        elif first.elements is not None:
            ns[f"W{g}"], ns[f"E{g}"] = first.write, first.elements.write
            body += [f"v = obj.{first.name}", "if v is not None and len(v) < 127:", "    buf.append(len(v) + 1)",
                     "    for item in v:", f"        E{g}(w, item)", "else:", f"    W{g}(w, v)"]
        else:
            ns[f"W{g}"] = first.write
            body.append(f"W{g}(w, obj.{first.name})")
    if flexible and tagged_defaults:
        body.append("f = 'tagged fields'")
        unchanged = []
        for t, (name, default) in enumerate(tagged_defaults.items()):
            ns[f"T{t}"] = default
            body.append(f"t{t} = obj.{name}")
            unchanged.append(f"(t{t} is T{t} or t{t} == T{t})")
        body += [f"if {' and '.join(unchanged)}:", "    buf.append(0)", "else:", "    write_tagged(w, obj)"]
    elif flexible:
        body.append("buf.append(0)")
    if not body:
        return _define("write", ["def write(w, obj):", "    return None"], ns, cls)
    context = f"{cls.__qualname__}.{{f}} (v{version}): {{e}}"
    lines = ["def write(w, obj):", "    buf = w.buf", "    f = '?'", "    try:"]
    lines += [f"        {line}" for line in body]
    lines += ["    except FAILURES as e:", f"        raise EncodeError(f{context!r}) from e"]
    return _define("write", lines, ns, cls)


def _define(name: str, lines: list[str], ns: dict[str, Any], cls: type) -> Callable[..., Any]:
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<{name} {cls.__module__}.{cls.__qualname__}>", "exec"), ns)
    function: Callable[..., Any] = ns[name]
    function.__qualname__ = f"{cls.__qualname__}.{name}"
    return function
