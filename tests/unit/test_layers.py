"""The layer map of pybroker's packages, checked: every import of every module (at the top, inside functions,
under TYPE_CHECKING, and ``importlib.import_module`` of a literal name) must point down the map.

    common  <-  records, protocol, security, zk  <-  log, client  <-  replication, coordinator, controller,
    schema_registry  <-  server  <-  __main__

A package may import the packages of the tiers below its own, except where ``NARROWER`` says less: the log
reads and writes records but knows nothing of the wire protocol, security or ZooKeeper. Beside the tiers,
the command-line tools (``admin``), the web console and the embedded-broker helpers for tests (``testing``)
reach a broker only over the wire: through ``client`` and the libraries below it, never broker internals.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pybroker

TIERS: list[set[str]] = [
    {"common"},
    {"records", "protocol", "security", "zk"},
    {"log", "client"},
    {"replication", "coordinator", "controller", "schema_registry"},
    {"server"},
    {"__main__"},
]
NARROWER: dict[str, set[str]] = {"log": {"common", "records"}}
ON_THE_WIRE = {"client", "common", "protocol", "records", "security"}
SIDE: dict[str, set[str]] = {
    "admin": ON_THE_WIRE | {"zk"},  # `topics --zookeeper` writes the znodes itself, as Kafka's old TopicCommand
    "console": ON_THE_WIRE,
    "testing": ON_THE_WIRE,
    "spark_jobs": set(),
    "samples": set(),
}


def allowed_imports() -> dict[str, set[str]]:
    """Package -> the other packages it may import."""
    allowed = {name: set(names) for name, names in SIDE.items()}
    below: set[str] = set()
    for tier in TIERS:
        for name in tier:
            allowed[name] = NARROWER.get(name, below)
        below = below | tier
    allowed["__main__"] = allowed["__main__"] | set(SIDE)
    allowed["__init__"] = {"common"}  # pybroker/__init__.py: the compiled build's check (common/native.py)
    return allowed


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, the file of ``module`` (a package's
    ``__init__.py`` is the package itself)."""
    found: list[tuple[int, str]] = []
    package_parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package_parts[:len(package_parts) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target == "pybroker":  # `from pybroker import log`: the names may be packages
                found += [(node.lineno, f"pybroker.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                   or isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            found.append((node.lineno, node.args[0].value))
    return found


def violations(root: Path) -> list[str]:
    """Every import in the ``pybroker`` package at ``root`` that goes against the layer map."""
    allowed = allowed_imports()
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        source = parts[1]
        if source not in allowed:
            found.append(f"{path}: package {source!r} is not on the layer map (tests/unit/test_layers.py)")
            continue
        for line, target in imported_modules(path, module):
            names = target.split(".")
            if names[0] != "pybroker" or len(names) < 2:
                continue
            package = names[1]
            if package == source or package in allowed[source]:
                continue
            if not (root / package).is_dir() and not (root / f"{package}.py").exists():
                continue  # `from pybroker import __version__`: not a module of the tree
            found.append(f"{path.relative_to(root.parent)}:{line}: {source} imports {target}")
    return found


def test_every_import_follows_the_layer_map() -> None:
    assert violations(Path(pybroker.__file__).parent) == []


@pytest.mark.parametrize(("package", "module", "line"), [
    ("log", "segment.py", "from pybroker.protocol.messages import ProducerSnapshot\n"),
    ("admin", "zk_topics.py", "    from pybroker.server.error_mapping import error_code_for\n"),
    ("console", "app.py", "from pybroker.admin.options import UsageError\n"),
    ("client", "wire.py", "import pybroker.controller.election\n"),
    ("admin", "__init__.py", "importlib.import_module('pybroker.console.cli')\n"),
    ("records", "batch.py", "from ..log import segment\n"),
])
def test_a_planted_violation_is_found(tmp_path: Path, package: str, module: str, line: str) -> None:
    root = tmp_path / "pybroker"
    for name in ("common", "records", "log", "protocol", "client", "controller", "server", "admin", "console"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
    (root / package / module).write_text(f"import os\n\n\ndef f() -> None:\n    {line.strip()}\n")
    found = violations(root)
    assert len(found) == 1
    assert found[0].startswith(f"pybroker/{package}/{module}:5: {package} imports pybroker.")


def test_an_unmapped_package_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "pybroker"
    (root / "newcomer").mkdir(parents=True)
    (root / "newcomer" / "__init__.py").write_text("")
    assert violations(root) == [f"{root / 'newcomer' / '__init__.py'}: package 'newcomer' is not on the layer map "
                                "(tests/unit/test_layers.py)"]
