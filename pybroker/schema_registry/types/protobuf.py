"""Protobuf schemas: ``.proto`` text, or the base64 ``FileDescriptorProto`` confluent-kafka's Python
serializer sends, compiled by protoc (grpcio-tools' bundled compiler) with Confluent's bundled imports
(``google/protobuf/*.proto``, ``google/type/*.proto`` where installed, ``confluent/meta.proto``,
``confluent/type/decimal.proto``) and the schema's references as further files.

The stored string is the ``.proto`` text printed from the compiled descriptor, so a schema registered as
text and as a descriptor get the same id; ``format=serialized`` answers the descriptor in base64.
grpcio-tools is the ``schema-registry`` extra: without it, Protobuf schemas are refused with a reason.
"""

from __future__ import annotations

import base64
import binascii
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from pybroker.schema_registry.types import PROTOBUF, InvalidSchemaError
from pybroker.schema_registry.types.proto_text import render

MAIN_FILE = "default.proto"
_BUNDLED = Path(__file__).resolve().parents[1] / "protos"
COMPILE_TIMEOUT_S = 30
_PROTOC = "import sys\nfrom grpc_tools import _protoc_compiler\nsys.exit(_protoc_compiler.run_main([a.encode() for a in sys.argv[1:]]))"


class ProtobufSchema:
    schema_type = PROTOBUF

    def __init__(self, text: str, descriptor: Any, dependencies: Mapping[str, Any]) -> None:
        self.text = text
        self.descriptor = descriptor  # FileDescriptorProto of this schema alone
        self.dependencies = dict(dependencies)  # import name -> FileDescriptorProto

    def canonical(self) -> str:
        return self.text

    def normalized(self) -> ProtobufSchema:
        return self

    def serialized(self) -> str:
        return base64.b64encode(self.descriptor.SerializeToString()).decode("ascii")

    def read_errors(self, writer: Any) -> list[str]:
        from pybroker.schema_registry.compat.protobuf import read_errors

        if not isinstance(writer, ProtobufSchema):
            return [f"Incompatible schema type {writer.schema_type}"]
        return read_errors(self, writer)


def _descriptor_pb2() -> Any:
    from google.protobuf import descriptor_pb2

    return descriptor_pb2


def _include_paths() -> list[str]:
    try:
        import grpc_tools
    except ImportError:
        raise InvalidSchemaError("Protobuf schemas need the schema-registry extra: "
                                 "pip install 'pybroker[schema-registry]' (grpcio-tools)") from None
    paths = [str(_BUNDLED), os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")]
    try:
        import google.type as google_type  # googleapis-common-protos ships google/type/*.proto

        paths.append(str(Path(next(iter(google_type.__path__))).parents[1]))
    except ImportError:
        pass
    return paths


def _as_descriptor(text: str) -> Any | None:
    """The FileDescriptorProto a base64 schema string holds, or None for .proto text."""
    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or ";" in stripped:
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        return None
    descriptor = _descriptor_pb2().FileDescriptorProto()
    try:
        descriptor.ParseFromString(raw)
    except Exception:
        raise InvalidSchemaError("the schema is base64 but not a serialized FileDescriptorProto") from None
    return descriptor


def _as_text(schema: str) -> str:
    descriptor = _as_descriptor(schema)
    return schema if descriptor is None else render(descriptor)


def compile_files(main: str, dependencies: Mapping[str, str]) -> tuple[Any, dict[str, Any]]:
    """Compiles ``main`` with its dependencies: its FileDescriptorProto and theirs by import name.

    protoc runs in a child process: its reports go to the child's stderr, and a compiler crash on a
    hostile schema costs that child, not the broker."""
    descriptor_pb2 = _descriptor_pb2()
    includes = _include_paths()
    with tempfile.TemporaryDirectory(prefix="pybroker-proto-") as root:
        sources = {MAIN_FILE: main, **{name: _as_text(text) for name, text in dependencies.items()}}
        for name, text in sources.items():
            target = Path(root, name).resolve()
            if not str(target).startswith(os.path.realpath(root) + os.sep):
                raise InvalidSchemaError(f"reference name {name!r} leaves the import root")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        output = os.path.join(root, "out.desc")
        args = ["protoc", f"-I{root}", *(f"-I{path}" for path in includes), "--include_imports",
                f"--descriptor_set_out={output}", MAIN_FILE]
        try:
            done = subprocess.run([sys.executable, "-c", _PROTOC, *args], capture_output=True, text=True,
                                  timeout=COMPILE_TIMEOUT_S, cwd=root, errors="replace")
        except subprocess.TimeoutExpired:
            raise InvalidSchemaError(f"protoc took longer than {COMPILE_TIMEOUT_S} s") from None
        if done.returncode != 0:
            message = done.stderr.strip().replace(root + os.sep, "")
            raise InvalidSchemaError(message.splitlines()[0] if message else f"protoc exited with {done.returncode}")
        files = descriptor_pb2.FileDescriptorSet.FromString(Path(output).read_bytes()).file
    by_name = {f.name: f for f in files}
    return by_name[MAIN_FILE], {name: by_name[name] for name in dependencies if name in by_name}


def parse(text: str, dependencies: Mapping[str, str]) -> ProtobufSchema:
    given = _as_descriptor(text)
    source = text if given is None else render(given)
    main, deps = compile_files(source, dependencies)
    main.name = given.name if given is not None and given.name else MAIN_FILE
    printed = render(main)
    return ProtobufSchema(printed, main, deps)
