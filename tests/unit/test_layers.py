"""The layer map of pybroker's packages, checked: every import of every module (at the top, inside functions,
under TYPE_CHECKING, and ``importlib.import_module`` of a literal name) must point down the map, and no modules
import each other in a circle, within a package either.

    common  <-  records, protocol, security, zk  <-  log, client  <-  replication, coordinator, controller,
    schema_registry  <-  server  <-  __main__

A package may import the packages of the tiers below its own, except where ``NARROWER`` says less: the log
reads and writes records but knows nothing of the wire protocol, security or ZooKeeper. Beside the tiers,
the command-line tools (``admin``), the web console and the embedded-broker helpers for tests (``testing``)
reach a broker only over the wire: through ``client`` and the libraries below it, never broker internals.
"""

from __future__ import annotations

import ast
import functools
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


def imported_modules(path: Path, module: str, names: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, the file of ``module`` (a package's
    ``__init__.py`` is the package itself). With ``names``, ``from X import y`` gives ``X.y`` (``y`` may be a
    module of package ``X``)."""
    found: list[tuple[int, str]] = []
    package_parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(_parsed(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package_parts[:len(package_parts) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target == "pybroker" or names:  # `from pybroker import log`: the names may be packages
                found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                   or isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            found.append((node.lineno, node.args[0].value))
    return found


@functools.cache
def _parsed(source: str, filename: str) -> ast.Module:
    """Each file once, for the layer map and the circles both."""
    return ast.parse(source, filename)


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> its file, for every module of the package at ``root`` (a package's is its __init__.py)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def violations(root: Path) -> list[str]:
    """Every import in the ``pybroker`` package at ``root`` that goes against the layer map."""
    allowed = allowed_imports()
    found = []
    for module, path in module_files(root).items():
        source = path.relative_to(root.parent).parts[1].removesuffix(".py")
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


def circles(root: Path) -> list[list[str]]:
    """The modules of the package at ``root`` that import each other in a loop, one list a circle. An import
    of a package's ``__init__.py`` is left out: one that only hands its modules' names on is imported by them
    at run time anyway (Python imports a module's package first), and is no layer of its own."""
    files = module_files(root)
    imports: dict[str, set[str]] = {}
    for module, path in files.items():
        imports[module] = set()
        for _, target in imported_modules(path, module, names=True):
            while target and target not in files:  # `from X.y import Name`: module X.y
                target = target.rpartition(".")[0]
            if target and target != module and files[target].name != "__init__.py":
                imports[module].add(target)
    while ends := {module for module, targets in imports.items() if not targets & imports.keys()}:
        left = imports.keys() - ends
        imports = {module: imports[module] & left for module in left}
    reach = {module: _reachable(imports, module) for module in imports}  # what is left is on or before a circle
    found: list[list[str]] = []
    for module in sorted(imports):
        if module in reach[module] and not any(module in circle for circle in found):
            found.append(sorted(other for other in reach[module] if module in reach[other]))
    return found


def _reachable(imports: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(imports[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imports[module]
    return seen


def test_every_import_follows_the_layer_map() -> None:
    assert violations(Path(pybroker.__file__).parent) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    """A circle is broken by moving the shared piece down or handing the upper module's part in as a
    parameter, not by moving an import into a function (counted here too)."""
    assert circles(Path(pybroker.__file__).parent) == []


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    root = tmp_path / "pybroker"
    (root / "protocol" / "messages").mkdir(parents=True)
    for package in (root, root / "protocol", root / "protocol" / "messages"):
        (package / "__init__.py").write_text("")
    (root / "protocol" / "schema.py").write_text("def plan() -> None:\n    from pybroker.protocol import hot\n")
    (root / "protocol" / "hot.py").write_text("from pybroker.protocol.messages.fetch import FetchRequest\n")
    (root / "protocol" / "messages" / "fetch.py").write_text("from ..schema import Struct\n")
    (root / "protocol" / "frame.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                                "    from pybroker.protocol.primitives import Reader\n")
    (root / "protocol" / "primitives.py").write_text("import pybroker.protocol.frame\n")
    (root / "protocol" / "wire.py").write_text("from pybroker.protocol import schema\nimport pybroker.protocol.frame\n")
    assert circles(root) == [["pybroker.protocol.frame", "pybroker.protocol.primitives"],
                             ["pybroker.protocol.hot", "pybroker.protocol.messages.fetch",
                              "pybroker.protocol.schema"]]
    (root / "protocol" / "messages" / "__init__.py").write_text("from pybroker.protocol.messages.fetch import *\n")
    (root / "protocol" / "messages" / "fetch.py").write_text("from pybroker.protocol.messages import Struct\n")
    assert circles(root) == [["pybroker.protocol.frame", "pybroker.protocol.primitives"]]


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
