"""Write pybroker/protocol/hot_codecs.py: typed codecs of the messages every small request decodes or encodes
(the Fetch and Produce requests clients send, and their responses), as source that mypyc compiles.

codegen.py's readers and writers are built at run time with ``exec``, so the compiled build never compiles
them: an empty Fetch spent ~45k instructions decoding its request and ~29k encoding its answer in interpreted
calls. The functions written here take the usual case only (flexible versions, no tagged field on the wire or
every tagged field at its default, counts and short strings of one byte, valid UTF-8) with typed locals and
direct calls between them; anything else (and every error) gives up and leaves the message to the generic
codec from the same start, so both builds decode and encode exactly what the generic codec does.

    python tools/gen_codecs.py            # rewrite pybroker/protocol/hot_codecs.py
    python tools/gen_codecs.py --check    # exit 1 if it differs from what the message classes give
    python tools/gen_protocol.py          # runs this after writing the message classes (--check checks both)
"""

from __future__ import annotations

import argparse
import dataclasses
import struct
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pybroker.protocol.codegen import FORMATS  # noqa: E402
from pybroker.protocol.schema import ZERO_UUID, FieldSpec, Struct, resolve_struct  # noqa: E402

OUT = REPO / "pybroker" / "protocol" / "hot_codecs.py"
#: (module, class, direction, versions): requests are decoded by the broker, responses encoded.
HOT: tuple[tuple[str, str, str, range], ...] = (
    ("fetch", "FetchRequest", "read", range(12, 18)),
    ("fetch", "FetchResponse", "write", range(12, 18)),
    ("produce", "ProduceRequest", "read", range(9, 13)),
    ("produce", "ProduceResponse", "write", range(9, 13)),
)
_SIZES = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8,
          "uuid": 16}


def _in(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


@dataclasses.dataclass
class _Field:
    spec: FieldSpec
    compact: bool
    nullable: bool


class Renderer:
    """The functions of every hot (class, version) and what they share: struct layouts, class names, the
    array sites whose element size and cost the generic plans give at run time."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.layouts: dict[str, str] = {}
        self.bound: dict[str, tuple[str, str]] = {}  # a layout's bound method -> (layout, method)
        self.defaults: dict[type, str] = {}  # tagged struct classes: the name of their shared default instance
        self.classes: dict[type, str] = {}
        self.done: dict[tuple[str, type, int], str] = {}
        #: array sites by what their elements are (an element reader's name: the same body, the same fields,
        #: so the same size and cost at every version that shares it; or a fixed-size type)
        self.sites: dict[str, int] = {}
        self.uses: dict[str, dict[int, type | str]] = {}  # top-level key -> its sites and their elements
        self.top: str = ""
        self.bodies: dict[str, str] = {}  # a function's body -> the name it was written under

    def layout(self, fmt: str, method: str) -> str:
        """The name of a struct layout's bound method, read once at import: compiled, ``_S0.pack(...)`` looks
        the method up on every call (``PyObject_VectorcallMethod``), a bound one is called directly."""
        bound = f"{self.layouts.setdefault(fmt, f'_S{len(self.layouts)}')}_{method}"
        self.bound.setdefault(bound, (self.layouts[fmt], method))
        return bound

    def cls(self, cls: type) -> str:
        return self.classes.setdefault(cls, "_" + cls.__qualname__.replace(".", "_"))

    def site(self, elem: type | str, key: str) -> int:
        k = self.sites.setdefault(key, len(self.sites))
        self.uses.setdefault(self.top, {})[k] = elem
        return k

    @staticmethod
    def runs(regular: list[_Field]) -> list[list[_Field]]:
        """Consecutive fixed-size fields grouped (one struct call each); every other field alone."""
        groups: list[list[_Field]] = []
        for f in regular:
            if f.spec.type in FORMATS and groups and groups[-1][0].spec.type in FORMATS:
                groups[-1].append(f)
            else:
                groups.append([f])
        return groups

    @staticmethod
    def fields(cls: type, version: int) -> tuple[list[_Field], list[FieldSpec]]:
        regular, tagged = [], []
        spec: FieldSpec
        for spec in cls._SCHEMA:  # type: ignore[attr-defined]
            if not _in(spec.versions, version):
                continue
            if spec.tag is not None and _in(spec.tagged, version):
                tagged.append(spec)
            else:
                compact = True if spec.flexible is None else _in(spec.flexible, version)
                regular.append(_Field(spec, compact, _in(spec.nullable, version)))
        return regular, tagged

    @staticmethod
    def name(kind: str, cls: type, version: int) -> str:
        return f"_{kind}_{cls.__qualname__.replace('.', '_')}_v{version}"

    # ----------------------------------------------------------------------------------------- reading

    def reader(self, owner: type, cls: type, version: int) -> str:
        name = self.name("read", cls, version)
        if ("read", cls, version) in self.done:
            return self.done[("read", cls, version)]
        regular, _ = self.fields(cls, version)
        body = ["    buf = r.buf", "    end = r.end", "    pos = r.pos"]
        values: dict[str, str] = {}
        for group in self.runs(regular):
            first = group[0]
            typ = first.spec.type
            v = f"v_{first.spec.name}"
            values.update((f.spec.name, f"v_{f.spec.name}") for f in group)
            if typ in FORMATS:
                fmt = ">" + "".join(FORMATS[f.spec.type] for f in group)
                size = struct.calcsize(fmt)
                names = ", ".join(f"v_{f.spec.name}" for f in group)
                body += [f"    {names}, = {self.layout(fmt, 'unpack_from')}(buf, pos)", f"    pos += {size}"]
                body += [f"    v_{f.spec.name} = uuid_of(v_{f.spec.name})" for f in group if f.spec.type == "uuid"]
            elif typ == "string" and first.compact:
                body += ["    n = buf[pos] - 1", f"    if n < {-1 if first.nullable else 0} or n >= 0x7F or "
                         "pos + 1 + n > end:", "        raise Unusual()"]
                # an empty string (a rack id, most often) without a view and a decode
                if first.nullable:
                    body += ["    if n < 0:", f"        {v} = None", "        pos += 1", "    else:",
                             f"        {v} = str(buf[pos + 1:pos + 1 + n], 'utf-8') if n else ''", "        pos += 1 + n"]
                else:
                    body += [f"    {v} = str(buf[pos + 1:pos + 1 + n], 'utf-8') if n else ''", "    pos += 1 + n"]
            elif typ in ("records", "bytes") and first.compact:
                body += ["    n, pos = uvarint(buf, pos, end)", "    n -= 1",
                         f"    if n < {-1 if first.nullable else 0} or pos + n > end:", "        raise Unusual()"]
                value = "buf[pos:pos + n]" if typ == "records" else "bytes(buf[pos:pos + n])"
                if first.nullable:
                    body += ["    if n < 0:", f"        {v} = None", "    else:", f"        {v} = {value}",
                             "        pos += n"]
                else:
                    body += [f"    {v} = {value}", "    pos += n"]
            elif typ.startswith("[]") and first.compact:
                elem = typ[2:]
                body += ["    n = buf[pos] - 1", f"    if n < {-1 if first.nullable else 0} or n >= 0x7F:",
                         "        raise Unusual()"]
                if first.nullable:
                    body += ["    if n < 0:", f"        {v} = None", "        pos += 1", "    else:"]
                    pad = "        "
                else:
                    pad = "    "
                if elem == "int32":  # forgotten partitions
                    k = self.site(elem, elem)
                    body += [f"{pad}if n * 4 > end - pos - 1 or n * COST[{k}] > r.budget:",
                             f"{pad}    raise Unusual()", f"{pad}r.budget -= n * COST[{k}]",
                             f"{pad}{v} = list(struct.unpack_from(f'>{{n}}i', buf, pos + 1))",
                             f"{pad}pos += 1 + 4 * n"]
                elif elem in _SIZES or elem in ("string", "bytes", "records"):
                    body += [f"{pad}if n != 0:", f"{pad}    raise Unusual()", f"{pad}{v}: list[Any] = []", f"{pad}pos += 1"]
                else:
                    ecls = resolve_struct(owner, elem)
                    read_elem = self.reader(owner, ecls, version)
                    k = self.site(ecls, read_elem)
                    body += [f"{pad}if n * MIN_SIZE[{k}] > end - pos - 1 or n * COST[{k}] > r.budget:",
                             f"{pad}    raise Unusual()",
                             f"{pad}r.budget -= n * COST[{k}]", f"{pad}r.pos = pos + 1",
                             f"{pad}{v} = [{read_elem}(r) for _ in range(n)]",
                             f"{pad}pos = r.pos"]
            else:
                raise SystemExit(f"gen_codecs: {cls.__qualname__}.{first.spec.name} ({typ}) at v{version}: "
                                 f"no typed reader for this field")
        body += ["    if buf[pos] != 0:", "        raise Unusual()", "    r.pos = pos + 1"]
        args = [values[field.name] if field.name in values else self.default(cls, field)
                for field in dataclasses.fields(cls)]
        body.append(f"    return {self.cls(cls)}({', '.join(args)})")
        self.done[("read", cls, version)] = written = self.emit(f"def {name}(r: Reader) -> Any:", name, body)
        return written

    def emit(self, signature: str, name: str, body: list[str]) -> str:
        """Write the function, or name the one written before with the same body (a struct unchanged
        between versions)."""
        key = signature.replace(name, "") + "\n".join(body)
        if key in self.bodies:
            return self.bodies[key]
        self.bodies[key] = name
        self.lines += ["", "", signature, *body]
        return name

    def default(self, cls: type, f: dataclasses.Field[Any]) -> str:
        if f.default is not dataclasses.MISSING:
            if f.default is ZERO_UUID:
                return "ZERO_UUID"
            if f.default is None or isinstance(f.default, (bool, int, float, str)):
                return repr(f.default)
            raise SystemExit(f"gen_codecs: {cls.__qualname__}.{f.name}: default {f.default!r}")
        made = f.default_factory()  # type: ignore[misc,operator]
        if isinstance(made, list) and not made:
            return "[]"
        if isinstance(made, Struct):  # a tagged struct the request leaves out: the shared one at its defaults
            return self.defaults.setdefault(type(made), self.cls(type(made)) + "_DEFAULT")
        raise SystemExit(f"gen_codecs: {cls.__qualname__}.{f.name}: factory of {made!r}")

    # ----------------------------------------------------------------------------------------- writing

    def writer(self, owner: type, cls: type, version: int) -> str:
        name = self.name("write", cls, version)
        if ("write", cls, version) in self.done:
            return self.done[("write", cls, version)]
        regular, tagged = self.fields(cls, version)
        body = ["    buf = w.buf"]
        for group in self.runs(regular):
            first = group[0]
            typ = first.spec.type
            attr = f"obj.{first.spec.name}"
            if typ in FORMATS:
                fmt = ">" + "".join(FORMATS[f.spec.type] for f in group)
                values = [f"uuid_bytes(obj.{f.spec.name})" if f.spec.type == "uuid" else f"obj.{f.spec.name}"
                          for f in group]
                if fmt == ">16s":  # a uuid alone: its 16 bytes as they are, not packed again into a copy
                    body.append(f"    buf += {values[0]}")
                else:
                    body.append(f"    buf += {self.layout(fmt, 'pack')}({', '.join(values)})")
            elif typ in ("string", "bytes", "records") and first.compact:
                method = {"string": "write_compact_string", "bytes": "write_compact_bytes",
                          "records": "write_compact_records"}[typ]
                if first.nullable:
                    body.append(f"    w.{method}({attr})")
                else:
                    body += [f"    v = {attr}", "    if v is None:", "        raise Unusual()", f"    w.{method}(v)"]
            elif typ.startswith("[]") and first.compact:
                elem = typ[2:]
                body += [f"    items = {attr}", "    if items is None:"]
                body += ["        buf.append(0)"] if first.nullable else ["        raise Unusual()"]
                body += ["    else:", "        n = len(items)"]
                if elem in _SIZES or elem in ("string", "bytes", "records"):
                    body += ["        if n != 0:", "            raise Unusual()", "        buf.append(1)"]
                else:
                    ecls = resolve_struct(owner, elem)
                    body += ["        if n >= 0x7F:", "            raise Unusual()", "        buf.append(n + 1)",
                             "        for item in items:", f"            {self.writer(owner, ecls, version)}(w, item)"]
            else:
                raise SystemExit(f"gen_codecs: {cls.__qualname__}.{first.spec.name} ({typ}) at v{version}: "
                                 f"no typed writer for this field")
        # every tagged field at its default: the section is one zero byte (the generic writer writes the rest)
        defaults = {f.name: f for f in dataclasses.fields(cls)}
        for spec in tagged:
            shared = self.shared_default(defaults[spec.name])
            test = self.is_default('t', defaults[spec.name])
            body += [f"    t = obj.{spec.name}",
                     f"    if {'' if shared is None else f't is not {shared} and '}not ({test}):",
                     "        raise Unusual()"]
        body.append("    buf.append(0)")
        self.done[("write", cls, version)] = written = self.emit(f"def {name}(w: Writer, obj: Any) -> None:", name,
                                                                  body)
        return written

    def shared_default(self, f: dataclasses.Field[Any]) -> str | None:
        """For a tagged struct field, the module's shared instance of the struct at its defaults (:data:`DEFAULT`):
        an answer that carries it is known to be at its default without reading its fields."""
        if f.default is not dataclasses.MISSING:
            return None
        made = f.default_factory()  # type: ignore[misc,operator]
        if not isinstance(made, Struct):
            return None
        return self.defaults.setdefault(type(made), self.cls(type(made)) + "_DEFAULT")

    def is_default(self, value: str, f: dataclasses.Field[Any]) -> str:
        """An expression true when ``value`` equals ``f``'s default as the generic writer's ``==`` has it."""
        if f.default is not dataclasses.MISSING:
            if f.default is ZERO_UUID:
                return f"{value} == ZERO_UUID"
            return f"{value} is None" if f.default is None else f"{value} == {f.default!r}"
        made = f.default_factory()  # type: ignore[misc,operator]
        if isinstance(made, list) and not made:
            return f"type({value}) is list and len({value}) == 0"
        if isinstance(made, Struct):
            scls = type(made)
            parts = [f"type({value}) is {self.cls(scls)}"]
            for sub in dataclasses.fields(scls):
                parts.append(self.is_default(f"{value}.{sub.name}", sub))
            return " and ".join(parts)
        raise SystemExit(f"gen_codecs: {f.name}: factory of {made!r}")

    # ----------------------------------------------------------------------------------------- module

    def render(self) -> str:
        import importlib

        tops: list[tuple[str, str, str, int]] = []
        for module, clsname, direction, versions in HOT:
            cls = getattr(importlib.import_module(f"pybroker.protocol.messages.{module}"), clsname)
            for version in versions:
                self.top = f"{clsname}_v{version}"
                fn = self.reader(cls, cls, version) if direction == "read" else self.writer(cls, cls, version)
                tops.append((direction, clsname, fn, version))
        head = [
            "# GENERATED by tools/gen_codecs.py from the message classes. DO NOT EDIT.",
            '"""Typed codecs of the hot messages (tools/gen_codecs.py says why), compiled by mypyc in the compiled',
            "build and run as they are in the pure one. Each takes the usual case only and raises :class:`Unusual`",
            "for anything else; :func:`codecs` wraps them so that the generic codec of the same (class, version)",
            "then starts over from the same position: the same objects, bytes and errors either way. The broker's",
            "dispatcher hands :func:`codecs` to schema.use_typed_codecs: this module imports the message classes,",
            'which import schema.py, so schema.py does not import it."""',
            "",
            "from __future__ import annotations",
            "",
            "import struct",
            "import uuid",
            "from collections.abc import Callable",
            "from typing import Any, Final",
            "",
            "from pybroker.protocol.messages.fetch import FetchRequest, FetchResponse",
            "from pybroker.protocol.messages.produce import ProduceRequest, ProduceResponse",
            "from pybroker.protocol.primitives import ZERO_UUID, Reader, Writer, uuid_of",
            "",
            "Read = Callable[[Reader], Any]",
            "Write = Callable[[Writer, Any], None]",
            "",
            "",
            "class Unusual(Exception):",
            '    """Input or a value the typed codec does not take: the generic codec does."""',
            "",
            "",
        ]
        head += [f"{n}: Final = struct.Struct({fmt!r})" for fmt, n in self.layouts.items()]
        head += [f"{n}: Final = {layout}.{method}" for n, (layout, method) in self.bound.items()]
        head += [f"{n}: Final = {c.__qualname__}" for c, n in self.classes.items()]
        head += [
            "#: Tagged structs at their defaults, one shared instance each: an answer built with one of them (as the",
            "#: Fetch and Produce handlers build theirs, through :func:`shared_default`) skips reading its fields, and",
            "#: a request read here that leaves one out carries it (an interpreted constructor fewer per Fetch v12+).",
            "#: Nothing may change them in place.",
        ]
        head += [f"{n}: Final = {self.cls(c)}()" for c, n in self.defaults.items()]
        head += ["DEFAULT: Final[dict[type, Any]] = {"] + [f"    {self.cls(c)}: {n}," for c, n in self.defaults.items()]
        head += ["}", "", "", "def shared_default(cls: type) -> Any:",
                 '    """The shared instance of the tagged struct ``cls`` at its defaults."""',
                 "    return DEFAULT[cls]", "", ""]
        head += [
            "#: Per array site: the generic plan's element size and cost (schema.py), set by :func:`codecs`.",
            f"MIN_SIZE: Final[list[int]] = [0] * {len(self.sites)}",
            f"COST: Final[list[int]] = [0] * {len(self.sites)}",
            "#: The array sites of each hot (class, version): (site, element class).",
            "SITES: Final[dict[str, tuple[tuple[int, type | str], ...]]] = {",
        ]
        for top, uses in self.uses.items():
            items = [f"({k}, {self.cls(elem) if isinstance(elem, type) else repr(elem)})" for k, elem in uses.items()]
            head += [f"    {top!r}: ({', '.join(items)},),"]
        head += ["}", "", "", "def uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:",
                 '    """An unsigned varint of at most 5 bytes and the position after it."""',
                 "    value = 0", "    shift = 0", "    while shift < 35:", "        if pos >= end:",
                 "            raise Unusual()", "        b: int = buf[pos]", "        pos += 1",
                 "        value |= (b & 0x7F) << shift", "        if b < 0x80:", "            return value, pos",
                 "        shift += 7", "    raise Unusual()", "", "",
                 "def uuid_bytes(value: uuid.UUID | None) -> bytes:",
                 "    return (value or ZERO_UUID).int.to_bytes(16, 'big')"]
        tail = ["", "", "class _Read:", '    """A typed reader, then the generic one from the same start."""', "",
                "    def __init__(self, slow: Read) -> None:", "        self.slow = slow", "",
                "    def __call__(self, r: Reader) -> Any:", "        raise NotImplementedError", "", "",
                "class _Write:", '    """A typed writer, then the generic one over what it wrote."""', "",
                "    def __init__(self, slow: Write) -> None:", "        self.slow = slow", "",
                "    def __call__(self, w: Writer, obj: Any) -> None:", "        raise NotImplementedError"]
        for direction, clsname, fn, version in tops:
            if direction == "read":
                tail += ["", "", f"class {clsname}V{version}(_Read):", "    def __call__(self, r: Reader) -> Any:",
                         "        pos = r.pos", "        budget = r.budget", "        try:",
                         f"            return {fn}(r)", "        except Exception:", "            r.pos = pos",
                         "            r.budget = budget", "            return self.slow(r)"]
            else:
                tail += ["", "", f"class {clsname}V{version}(_Write):",
                         "    def __call__(self, w: Writer, obj: Any) -> None:", "        size = len(w.buf)",
                         "        holes = len(w.holes)", "        try:", f"            {fn}(w, obj)",
                         "        except Exception:", "            del w.buf[size:]", "            del w.holes[holes:]",
                         "            self.slow(w, obj)"]
        tail += ["", "", "_READERS: Final[dict[str, type[_Read]]] = {"]
        tail += [f"    '{c}_v{v}': {c}V{v}," for d, c, _, v in tops if d == "read"]
        tail += ["}", "_WRITERS: Final[dict[str, type[_Write]]] = {"]
        tail += [f"    '{c}_v{v}': {c}V{v}," for d, c, _, v in tops if d == "write"]
        tail += ["}", "#: The typed codecs themselves, by (class, version), for the tests that hold them to the generic ones.",
                 "TYPED_READ: Final[dict[str, Read]] = {"]
        tail += [f"    '{c}_v{v}': {fn}," for d, c, fn, v in tops if d == "read"]
        tail += ["}", "TYPED_WRITE: Final[dict[str, Write]] = {"]
        tail += [f"    '{c}_v{v}': {fn}," for d, c, fn, v in tops if d == "write"]
        tail += ["}", "_MODULES: Final = frozenset({'pybroker.protocol.messages.fetch', "
                 "'pybroker.protocol.messages.produce'})", "", "",
                 "def codecs(cls: type, version: int, read: Read, write: Write,",
                 "           element: Callable[[type | str, int], tuple[int, int]]) -> tuple[Read, Write]:",
                 '    """``read`` and ``write``, the generic codecs of ``cls`` at ``version``, with the typed ones in front',
                 "    where there are; ``element(cls or type, version)`` gives an array element's size and cost.\"\"\"",
                 "    key = f'{cls.__qualname__}_v{version}' if cls.__module__ in _MODULES else ''",
                 "    fast_read = _READERS.get(key)", "    fast_write = _WRITERS.get(key)",
                 "    if fast_read is None and fast_write is None:", "        return read, write",
                 "    for k, elem in SITES.get(key, ()):", "        MIN_SIZE[k], COST[k] = element(elem, version)",
                 "    return (read if fast_read is None else fast_read(read),",
                 "            write if fast_write is None else fast_write(write))"]
        return "\n".join(head + self.lines + tail) + "\n"


def render() -> str:
    return Renderer().render()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the committed file differs")
    ap.add_argument("--print", action="store_true", help="do not write; print what the file should hold")
    args = ap.parse_args(argv)
    text = render()
    if args.print:
        sys.stdout.write(text)
        return 0
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(REPO)} is out of date (run python tools/gen_codecs.py)", file=sys.stderr)
            return 1
        print(f"ok: {OUT.relative_to(REPO)} is up to date")
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
