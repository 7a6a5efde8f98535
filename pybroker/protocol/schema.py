"""The small engine that turns the generated schema tables into codecs.

Generated message modules contain only dataclasses plus a ``_SCHEMA`` tuple of
:class:`FieldSpec` rows per class (plain data, Kafka's JSON specs translated
1:1).  On first use of a ``(class, version)`` pair we compile those rows into a
:class:`Plan` with every version/nullability/flexibility decision already taken,
and ``codegen`` turns the plan's fields into one read and one write function,
so encoding and decoding never look at version ranges or field tables again.
"""

from __future__ import annotations

import dataclasses
import functools
import reprlib
import struct
import sys
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, Self

from pybroker.protocol.codegen import ENCODE_FAILURES, FORMATS, Elements, WireField, build_reader, build_writer
from pybroker.protocol.errors import DecodeError, EncodeError
from pybroker.protocol.primitives import UNBOUNDED, ZERO_UUID, BytesLike, Reader, Spliced, Writer

__all__ = [
    "FieldSpec",
    "Struct",
    "Message",
    "Plan",
    "get_plan",
    "use_typed_codecs",
    "resolve_struct",
    "owner_of",
    "is_flexible",
    "PRIMITIVE_TYPES",
    "ZERO_UUID",
    "Records",
    "DECODE_BUDGET",
    "decode_budget",
]

#: Upper bound used for open-ended version ranges such as ``"3+"`` (Java's Short.MAX_VALUE).
MAX_VERSION = 0x7FFF

#: What a ``records`` field may hold: any bytes-like object (decoded as a zero-copy memoryview),
#: or, when encoding, a :class:`Spliced` file range the sender splices in.
Records = BytesLike | Spliced

#: What the objects of one decoded request may cost, in estimated bytes of Python memory (see ``_COST``). Kafka
#: only checks an array's count against the bytes left; here a 100 MiB frame of 50M two-byte elements would
#: still become gigabytes of objects. 64 MiB covers ~200k partitions of a Fetch, Produce or OffsetCommit.
DECODE_BUDGET = 64 << 20
#: Requests that carry every partition of the cluster: the controller's LeaderAndIsr, UpdateMetadata and
#: StopReplica (~800 estimated bytes a partition: 256 MiB is ~300k partitions).
_LARGE_BUDGET = 256 << 20
_REQUEST_BUDGETS: dict[str, int] = {
    "LeaderAndIsrRequest": _LARGE_BUDGET,
    "UpdateMetadataRequest": _LARGE_BUDGET,
    "StopReplicaRequest": _LARGE_BUDGET,
}
#: Estimated CPython (64-bit) bytes of one decoded value, content aside (content is bounded by the input):
#: an int object, a str/bytes header, a memoryview, a UUID and its int, an empty list.
_COST = {"bool": 0, "int8": 32, "int16": 32, "uint16": 32, "int32": 32, "uint32": 32, "int64": 32,
         "float64": 24, "uuid": 100, "string": 56, "bytes": 40, "records": 184}
_LIST_COST = 56
#: A list slot per element.
_SLOT_COST = 8
#: Charged per tagged field read, so a frame of millions of unknown tags is bounded in work too.
_TAG_COST = 64

Read = Callable[[Reader], Any]
Write = Callable[[Writer, Any], None]


class FieldSpec(NamedTuple):
    """One field of a generated schema table (a row of Kafka's JSON spec).

    Version ranges are inclusive ``(low, high)`` pairs; ``(0, -1)`` means "none".
    ``flexible`` overrides the message's flexible versions for this field only
    (RequestHeader.ClientId stays a non-compact string in header v2).
    """

    name: str
    kafka_name: str
    type: str
    versions: tuple[int, int]
    nullable: tuple[int, int] | None = None
    tag: int | None = None
    tagged: tuple[int, int] | None = None
    flexible: tuple[int, int] | None = None


class Plan(NamedTuple):
    """Precompiled codecs of one struct/message class at one version."""

    cls: type
    version: int
    flexible: bool
    #: Lower bound of the encoded size, used to reject absurd array counts early.
    min_size: int
    #: Estimated Python bytes of one decoded instance, its arrays' elements aside (charged to ``Reader.budget``).
    cost: int
    #: Generated (codegen.py): decode one instance from a Reader, and append one instance's encoding to a Writer.
    read: Read
    write: Write


def _in(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


# --------------------------------------------------------------------------- primitives

# type -> (reader, writer, fixed size); their struct formats are codegen.FORMATS
_FIXED: dict[str, tuple[Read, Write, int]] = {
    "bool": (Reader.read_bool, Writer.write_bool, 1),
    "int8": (Reader.read_int8, Writer.write_int8, 1),
    "int16": (Reader.read_int16, Writer.write_int16, 2),
    "uint16": (Reader.read_uint16, Writer.write_uint16, 2),
    "int32": (Reader.read_int32, Writer.write_int32, 4),
    "uint32": (Reader.read_uint32, Writer.write_uint32, 4),
    "int64": (Reader.read_int64, Writer.write_int64, 8),
    "float64": (Reader.read_float64, Writer.write_float64, 8),
    "uuid": (Reader.read_uuid, Writer.write_uuid, 16),
}

# type -> (non-compact reader, compact reader, non-compact writer, compact writer, min sizes)
_VARIABLE: dict[str, tuple[Read, Read, Write, Write, int, int]] = {
    "string": (Reader.read_string, Reader.read_compact_string,
               Writer.write_string, Writer.write_compact_string, 2, 1),
    "bytes": (Reader.read_bytes, Reader.read_compact_bytes,
              Writer.write_bytes, Writer.write_compact_bytes, 4, 1),
    # records are handed out as zero-copy memoryview slices of the input
    "records": (Reader.read_bytes_view, Reader.read_compact_bytes_view,
                Writer.write_records, Writer.write_compact_records, 4, 1),
}

PRIMITIVE_TYPES: frozenset[str] = frozenset(_FIXED) | frozenset(_VARIABLE)


def _non_null_reader(read: Read, what: str) -> Read:
    def read_non_null(r: Reader) -> Any:
        v = read(r)
        if v is None:
            raise DecodeError(f"non-nullable field {what} was serialized as null")
        return v

    return read_non_null


def _non_null_writer(write: Write, what: str) -> Write:
    def write_non_null(w: Writer, v: Any) -> None:
        if v is None:
            raise EncodeError(f"field {what} is not nullable in this version")
        write(w, v)

    return write_non_null


def _array_codec(elem: str, read: Read, write: Write, elem_min: int, elem_cost: int, compact: bool,
                 nullable: bool, what: str) -> tuple[Read, Write]:
    """Build codecs for ``[]elem``; fixed-size numeric elements use one bulk (un)pack."""
    fmt = FORMATS[elem] if elem in _FIXED and elem != "uuid" else ""  # uuids are built one by one
    elem_cost += _SLOT_COST

    def read_array(r: Reader) -> list[Any] | None:
        if compact:
            pos = r.pos
            if pos < r.end and r.buf[pos] < 0x80:  # a count under 127, inline
                n = r.buf[pos] - 1
                r.pos = pos + 1
            else:
                n = r.read_uvarint() - 1
        else:
            n = r.read_int32()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise DecodeError(f"invalid or unexpected null length {n} for array {what}")
        # every element costs >= 1 byte in practice; also caps lists of empty structs
        if n * (elem_min or 1) > r.end - r.pos:
            raise DecodeError(f"array {what} claims {n} elements but only "
                              f"{r.end - r.pos} bytes remain")
        cost = n * elem_cost
        if cost > r.budget:
            raise DecodeError(f"array {what} of {n} elements would exceed the request's decode budget")
        r.budget -= cost
        if fmt:
            items = list(struct.unpack_from(f">{n}{fmt}", r.buf, r.pos))
            r.pos += n * elem_min
            return items
        return [read(r) for _ in range(n)]

    def write_array(w: Writer, v: list[Any] | None) -> None:
        if v is None:
            if not nullable:
                raise EncodeError(f"array {what} is not nullable in this version")
            if compact:
                w.buf.append(0)
            else:
                w.buf += b"\xff\xff\xff\xff"
            return
        n = len(v)
        if compact:
            w.write_uvarint(n + 1)
        else:
            w.write_int32(n)
        if fmt:
            w.buf += struct.pack(f">{n}{fmt}", *v)
        else:
            for item in v:
                write(w, item)

    return read_array, write_array


def _struct_codec(plan: Plan, nullable: bool) -> tuple[Read, Write]:
    if not nullable:
        return plan.read, plan.write
    read_struct, write_struct = plan.read, plan.write

    def read_nullable(r: Reader) -> Any:
        return None if r.read_int8() < 0 else read_struct(r)

    def write_nullable(w: Writer, v: Any) -> None:
        if v is None:
            w.buf.append(0xFF)
        else:
            w.buf.append(1)
            write_struct(w, v)

    return read_nullable, write_nullable


def _codec(owner: type, typ: str, compact: bool, nullable: bool, version: int,
           what: str) -> tuple[Read, Write, int, int]:
    """Return ``(reader, writer, min_size, cost)`` for one Kafka type at one version."""
    if typ in _FIXED:
        read, write, size = _FIXED[typ]
        return read, write, size, _COST[typ]
    if typ in _VARIABLE:
        rd, crd, wr, cwr, size, csize = _VARIABLE[typ]
        read, write, min_size = (crd, cwr, csize) if compact else (rd, wr, size)
        if not nullable:
            read, write = _non_null_reader(read, what), _non_null_writer(write, what)
        return read, write, min_size, _COST[typ]
    if typ.startswith("[]"):
        elem = typ[2:]
        eread, ewrite, emin, ecost = _codec(owner, elem, compact, False, version, what + "[]")
        read, write = _array_codec(elem, eread, ewrite, emin, ecost, compact, nullable, what)
        return read, write, 1 if compact else 4, _LIST_COST
    scls = resolve_struct(owner, typ)
    plan = get_plan(scls, version)
    read, write = _struct_codec(plan, nullable)
    return read, write, 1 if nullable else plan.min_size, plan.cost


# --------------------------------------------------------------------------- plans

_PLANS: dict[tuple[type, int], Plan] = {}
_OWNERS: dict[type, type] = {}

#: ``typed(cls, version, read, write, element)``: the generic codecs of ``cls`` at ``version`` with typed ones put
#: in front where there are (``element(cls or type, version)`` gives an array element's size and cost).
TypedCodecs = Callable[[type, int, Read, Write, Callable[[type | str, int], tuple[int, int]]], tuple[Read, Write]]
_typed_codecs: TypedCodecs | None = None


def use_typed_codecs(typed: TypedCodecs) -> None:
    """Put ``typed`` in front of every plan from now on; the plans compiled before are dropped, to be compiled
    again with it. Handed in by the broker (hot_codecs.codecs): its typed codecs import the message classes,
    which import this module."""
    global _typed_codecs
    if typed is not _typed_codecs:
        _typed_codecs = typed
        _PLANS.clear()


def owner_of(cls: type) -> type:
    """The top-level message class a (possibly nested) struct class belongs to."""
    owner = _OWNERS.get(cls)
    if owner is None:
        owner = cls
        root = cls.__qualname__.split(".", 1)[0]
        module = sys.modules.get(cls.__module__)
        candidate = getattr(module, root, None) if module is not None else None
        if isinstance(candidate, type):
            owner = candidate
        _OWNERS[cls] = owner
    return owner


def resolve_struct(cls: type, name: str) -> type[Struct]:
    """Find the struct class ``name`` referenced from a schema of ``cls``'s message."""
    scls = getattr(owner_of(cls), name, None)
    if not (isinstance(scls, type) and issubclass(scls, Struct)):
        raise TypeError(f"{cls.__qualname__}: unknown struct type {name!r}")
    return scls


def is_flexible(cls: type, version: int) -> bool:
    """Whether ``version`` of ``cls``'s message uses the flexible (KIP-482) encoding."""
    fmin = getattr(owner_of(cls), "FLEXIBLE_MIN", None)
    return fmin is not None and version >= fmin


def _defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _constructor_layout(cls: type, wire: set[str]) -> tuple[dict[str, int], tuple[Any, ...],
                                                            tuple[tuple[int, Any], ...]]:
    """Positions, immutable-default template and factories for ``cls(*values)``."""
    position: dict[str, int] = {}
    template: list[Any] = []
    factories: list[tuple[int, Any]] = []
    for i, f in enumerate(dataclasses.fields(cls)):
        position[f.name] = i
        if f.default is not dataclasses.MISSING:
            template.append(f.default)
        else:
            template.append(None)
            if f.name not in wire and f.default_factory is not dataclasses.MISSING:
                factories.append((i, f.default_factory))
    return position, tuple(template), tuple(factories)


def get_plan(cls: type, version: int) -> Plan:
    """The cached :class:`Plan` of ``cls`` at ``version`` (compiled on first use)."""
    plan = _PLANS.get((cls, version))
    if plan is None:
        plan = _compile(cls, version)
        _PLANS[(cls, version)] = plan
    return plan


def _compile(cls: type, version: int) -> Plan:
    owner = owner_of(cls)
    flexible = is_flexible(cls, version)
    defaults = _defaults(cls)
    tagged: list[tuple[int, str, Write, Any]] = []
    tag_readers: dict[int, tuple[str, Read]] = {}
    regular: list[tuple[FieldSpec, bool, Read, Write, bool]] = []
    min_size = 1 if flexible else 0
    cost = sys.getsizeof(cls())
    spec: FieldSpec
    for spec in cls._SCHEMA:  # type: ignore[attr-defined]
        if not _in(spec.versions, version):
            continue
        compact = flexible if spec.flexible is None else _in(spec.flexible, version)
        nullable = _in(spec.nullable, version)
        what = f"{cls.__qualname__}.{spec.name}"
        read, write, size, field_cost = _codec(owner, spec.type, compact, nullable, version, what)
        if flexible and spec.tag is not None and _in(spec.tagged, version):
            tagged.append((spec.tag, spec.name, write, defaults.get(spec.name)))
            tag_readers[spec.tag] = (spec.name, read)
        else:
            regular.append((spec, compact, read, write, nullable))
            min_size += size
            cost += field_cost
    tagged.sort(key=lambda t: t[0])
    pos, template, factories = _constructor_layout(cls, {spec.name for spec, *_ in regular})
    fields = []
    for spec, compact, read, write, nullable in regular:
        raw = _VARIABLE.get(spec.type)
        raw_read, raw_write = ((raw[1], raw[3]) if compact else (raw[0], raw[2])) if raw else (None, None)
        elem = spec.type[2:] if spec.type.startswith("[]") else ""
        elements = None
        if compact and elem and elem not in _FIXED and elem not in _VARIABLE:  # a compact array of structs
            plan = get_plan(resolve_struct(owner, elem), version)
            elements = Elements(plan.read, plan.write, *_element(plan.cls, version))
        fields.append(WireField(spec.name, spec.type, pos[spec.name], nullable, read, write, raw_read, raw_write,
                                elements))
    positioned = {tag: (pos[name], rd) for tag, (name, rd) in tag_readers.items()}

    def read_tagged(r: Reader, values: list[Any]) -> None:
        _read_tagged(cls, positioned, r, values)

    tagged_rows = tuple(tagged)

    def write_tagged(w: Writer, obj: Any) -> None:
        _write_tagged(tagged_rows, w, obj)

    read = build_reader(cls, fields, flexible, template, factories, read_tagged)
    write = build_writer(cls, version, fields, flexible, {name: default for _, name, _, default in tagged},
                         write_tagged)
    if _typed_codecs is not None:
        read, write = _typed_codecs(cls, version, read, write, _element)
    return Plan(cls, version, flexible, min_size, cost, read, write)


def _element(cls: type | str, version: int) -> tuple[int, int]:
    """What one ``cls`` (a struct class, or a fixed-size type) in a compact array costs the decode: its least
    size on the wire and its budget share (as ``Elements`` of the generated readers and ``_array_codec`` have
    them)."""
    if isinstance(cls, str):
        return _FIXED[cls][2], _COST[cls] + _SLOT_COST
    plan = get_plan(cls, version)
    return plan.min_size or 1, plan.cost + _SLOT_COST


# --------------------------------------------------------------------------- tagged fields

def _read_tagged(cls: type, readers: dict[int, tuple[int, Read]], r: Reader, values: list[Any]) -> None:
    """A non-empty tagged-field section into ``values`` (constructor arguments); unknown tags are skipped."""
    count = r.read_uvarint()
    if count * _TAG_COST > r.budget:
        raise DecodeError(f"{count} tagged fields of {cls.__qualname__} would exceed the decode budget")
    r.budget -= count * _TAG_COST
    for _ in range(count):
        tag = r.read_uvarint()
        size = r.read_uvarint()
        end = r.pos + size
        if end > r.end:
            raise DecodeError(f"tagged field {tag} of {cls.__qualname__} claims "
                              f"{size} bytes but only {r.end - r.pos} remain")
        entry = readers.get(tag)
        if entry is None:  # unknown tag: skip it
            r.pos = end
            continue
        index, read = entry
        # decode from a zero-copy sub-view so the value cannot read past its own size
        sub = Reader(r.buf[r.pos : end], 0, r.budget)
        values[index] = read(sub)
        r.budget = sub.budget
        r.pos = end


def _write_tagged(tagged: tuple[tuple[int, str, Write, Any], ...], w: Writer, obj: Any) -> None:
    """The tagged-field section: the fields whose value differs from their default, by tag."""
    items: list[tuple[int, bytes]] = []
    for tag, name, write, default in tagged:
        value = getattr(obj, name)
        if value != default:
            tmp = Writer()
            try:
                write(tmp, value)
            except ENCODE_FAILURES as e:
                raise EncodeError(f"{name}: {e}") from e
            items.append((tag, tmp.getvalue()))
    w.write_uvarint(len(items))
    for tag, data in items:
        w.write_uvarint(tag)
        w.write_uvarint(len(data))
        w.buf += data


@functools.cache
def decode_budget(cls: type) -> int:
    """The object budget of decoding ``cls``: bounded for requests (what a client sends), not for the rest."""
    name = cls.__name__
    if not name.endswith("Request") or owner_of(cls) is not cls:
        return UNBOUNDED
    return _REQUEST_BUDGETS.get(name, DECODE_BUDGET)


class Struct:
    """Base of every generated struct: encode/decode through the schema engine.

    The generated dataclasses are declared ``repr=False`` and share the ``__repr__`` below, which gives what
    dataclasses' own would: compiled per class, it was ~0.8 MiB of an idle broker's memory over the ~110
    message modules it loads. Their ``__eq__`` stays dataclasses' own: the writers compare tagged struct fields
    with their defaults on every encode, and a shared one is 2.4x slower there.
    """

    __slots__ = ()
    _SCHEMA: ClassVar[tuple[FieldSpec, ...]] = ()
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # set by @dataclass on each generated class

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        fields = ", ".join(f"{field.name}={getattr(self, field.name)!r}" for field in dataclasses.fields(self))
        return f"{type(self).__qualname__}({fields})"

    def write(self, w: Writer, version: int) -> None:
        """Append this object's encoding at ``version`` to ``w``."""
        get_plan(type(self), version).write(w, self)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Decode one object at ``version`` from ``r`` (advancing ``r.pos``)."""
        return get_plan(cls, version).read(r)  # type: ignore[no-any-return]

    def encode(self, version: int) -> bytes:
        """This object's encoding at ``version`` (body only: no header, no size prefix)."""
        w = Writer()
        self.write(w, version)
        return w.getvalue()

    @classmethod
    def decode(cls, data: BytesLike, version: int) -> Self:
        """Decode an object at ``version`` from ``data`` (trailing bytes are ignored) within its decode budget."""
        # A class object is hashable; mypy checks type[Self] against its instances' __hash__ (python/mypy#11470).
        return cls.read(Reader(data, 0, decode_budget(cls)), version)  # type: ignore[arg-type]


class Message(Struct):
    """Base of every generated top-level message (request, response, header, data)."""

    __slots__ = ()
    API_KEY: ClassVar[int] = -1
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0
    FLEXIBLE_MIN: ClassVar[int | None] = None
    LATEST_VERSION_UNSTABLE: ClassVar[bool] = False

    def write(self, w: Writer, version: int) -> None:
        """Append this message's body at ``version`` to ``w``."""
        cls = type(self)
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise EncodeError(f"{cls.__qualname__} does not support version {version} "
                              f"(valid: {cls.MIN_VERSION}-{cls.MAX_VERSION})")
        get_plan(cls, version).write(w, self)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Decode a message body at ``version``; unsupported versions raise DecodeError(35)."""
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise DecodeError(f"{cls.__qualname__} does not support version {version} "
                              f"(valid: {cls.MIN_VERSION}-{cls.MAX_VERSION})", error_code=35)
        return get_plan(cls, version).read(r)  # type: ignore[no-any-return]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        """Whether ``version`` uses the flexible (compact + tagged fields) encoding."""
        return cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN
