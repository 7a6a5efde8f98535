"""Which build of pybroker runs: the hot modules compiled to C by mypyc (setup.py), or pure Python.

setup.py compiles :data:`COMPILED` where a C compiler is present and ``PYBROKER_PURE_PYTHON`` is not set. Each
compiled module is a small extension beside its ``.py`` (which Python imports first), and the code of them all
is one shared library beside the package (:data:`GROUP`). Python skips an extension built for another
interpreter without a word, and a partial set fails deep inside an import, so :func:`install` checks the set at
``import pybroker`` and refuses a wrong one with the fix. With ``PYBROKER_PURE_PYTHON=1`` at run time the
sources are imported instead, whatever is built. Standard library only: setup.py reads :data:`COMPILED` from
this file before pybroker's dependencies are installed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED", "C_EXTENSIONS", "GROUP", "PURE_ENV", "BuildError", "install", "pure_requested",
           "compiled_modules", "describe"]

#: The modules setup.py compiles: the synchronous code W1's and W12's profiles rank (the wire primitives the
#: generated codecs call, the typed codecs of the Fetch and Produce requests and responses, framing, record
#: batches and their validation, varints, fetch sessions, the partition).
#: No module with coroutines: compiled too, the connection pump, dispatch, the Produce and Fetch handlers,
#: ``append_records``, ``fetch_messages`` and the replica manager run 11-12% fewer user instructions per small
#: request (callgrind: 220k against 250k per empty Fetch, 261k against 296k per one-message Produce) but take no
#: less CPU: at equal fixed rates (benchmarks/paced.py, 2,500-5,000 requests/s) 0.96-1.10x this set's, with the
#: same system calls and context switches per request. Compiled code that runs once per request runs cold, at
#: about 3x the time per instruction of the interpreter's loop, and its attribute lookups on interpreted objects
#: are not specialized as the interpreter's are. (W12's 1.25x was the rate W12 reached: closed loop, the same
#: build costs 48 us per empty Fetch at 18,000 requests/s and 67 us at 10,500.)
#: The message classes stay interpreted dataclasses: mypyc keeps the dataclasses module's ``__init__`` for a
#: dataclass, so a native one is built more slowly even from compiled code (208 against 146 ns for a six-field
#: struct), and interpreted handlers read its attributes about 3x as slowly (docs/scaling.md).
COMPILED: tuple[str, ...] = (
    "pybroker.protocol.primitives",
    "pybroker.protocol.hot_codecs",
    "pybroker.protocol.frame",
    "pybroker.records.varint",
    "pybroker.records.record",
    "pybroker.records.batch",
    "pybroker.records.validation",
    "pybroker.server.fetch_sessions",
    "pybroker.replication.partition",
)
#: Modules written in C, built with :data:`COMPILED` (``setup.py``), each from the ``.c`` file beside where its
#: ``.py`` would be: only where mypyc cannot reach (the record walk: 6-9 against 17 ns a record; W1's lz4 broker
#: CPU per message 8-12% lower, replayed lz4 batches 10-21%). Each has a caller that runs the compiled Python
#: instead when it does not import (built for another Python, or missing), so :func:`check` only refuses a
#: checkout's build older than its source.
C_EXTENSIONS: tuple[str, ...] = ("pybroker.records._walk",)
#: mypyc's shared library of the compiled code (``group_name`` in setup.py), beside the package.
GROUP = "pybroker__mypyc"
PURE_ENV = "PYBROKER_PURE_PYTHON"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
_NATIVE_SUFFIXES = (".so", ".pyd")
_FIX = (f"reinstall pybroker with this Python (`pip install --force-reinstall --no-deps pybroker`, or "
        f"`make` / `pip install -e .` in a checkout), or set {PURE_ENV}=1 to run it as pure Python")


class BuildError(ImportError):
    """The compiled modules present cannot run here; the message names the fix."""


def pure_requested() -> bool:
    """``PYBROKER_PURE_PYTHON`` is set (to anything but 0): build and run pure Python."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def _source(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    return package_dir.joinpath(*module.split(".")[1:]).with_suffix(".py")


def _extensions(directory: Path, stem: str) -> list[Path]:
    """Extension files of module ``stem`` in ``directory``, for any interpreter."""
    return [path for path in directory.glob(f"{stem}.*") if path.suffix in _NATIVE_SUFFIXES]


def _for_this_python(directory: Path, stem: str) -> Path | None:
    """The extension of module ``stem`` in ``directory`` that this interpreter would import, if any."""
    found = (directory / (stem + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES)
    return next((path for path in found if path.exists()), None)


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Imports the ``.py`` of every compiled module, so that ``PYBROKER_PURE_PYTHON=1`` runs pure Python."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(fullname, _source(fullname))


def check(package_dir: Path = PACKAGE_DIR) -> None:
    """Raise :class:`BuildError` unless the compiled modules in ``package_dir`` are none, or all of them built
    for this Python (and, in a source checkout, not older than their sources)."""
    checkout = (package_dir.parent / "setup.py").exists()
    if checkout:
        _refuse_leftovers(package_dir)
        _refuse_stale_c(package_dir)
    sources = {module: _source(module, package_dir) for module in COMPILED}
    built = {module: _extensions(source.parent, source.stem) for module, source in sources.items()}
    present = [module for module, paths in built.items() if paths]
    if not present:
        return
    mine = {module: found for module in present
            if (found := _for_this_python(sources[module].parent, sources[module].stem)) is not None}
    if not mine:
        other = built[present[0]][0].name
        raise BuildError(f"pybroker's compiled modules were built for another Python ({other}), not this one "
                         f"(Python {sys.version.split()[0]}, {importlib.machinery.EXTENSION_SUFFIXES[0]}): {_FIX}")
    group = _for_this_python(package_dir.parent, GROUP)
    missing = [module for module in COMPILED if module not in mine] + ([] if group else [GROUP])
    if missing or group is None:
        raise BuildError(f"pybroker's compiled build is partial (no {', '.join(missing)} for this Python): {_FIX}")
    if checkout:  # where sources change after the build
        built_at = group.stat().st_mtime  # the compiled code (a rebuild leaves unchanged module stubs alone)
        stale = [module for module in mine if sources[module].stat().st_mtime > built_at]
        if stale:
            raise BuildError(f"pybroker's compiled modules are older than their sources ({', '.join(stale)}): "
                             f"{_FIX}")


def _refuse_stale_c(package_dir: Path) -> None:
    """A checkout's C module built before its source changed (mypyc's are checked against their shared library)."""
    for module in C_EXTENSIONS:
        source = _source(module, package_dir).with_suffix(".c")
        built = _for_this_python(source.parent, source.stem)
        if built is not None and source.exists() and source.stat().st_mtime > built.stat().st_mtime:
            raise BuildError(f"pybroker's compiled modules are older than their sources ({module}): {_FIX}")


def _refuse_leftovers(package_dir: Path) -> None:
    """A checkout's extension of a module no longer compiled (an earlier build's, which a rebuild leaves in place)
    would be imported instead of its source, by either build, without a word."""
    leftovers = [path for suffix in _NATIVE_SUFFIXES for path in sorted(package_dir.rglob(f"*{suffix}"))
                 if ".".join((package_dir.name, *path.relative_to(package_dir).with_name(
                     path.name.split(".")[0]).parts)) not in COMPILED + C_EXTENSIONS]
    if leftovers:
        raise BuildError(f"pybroker's checkout holds compiled modules of an earlier build that are no longer "
                         f"compiled ({', '.join(str(p.relative_to(package_dir.parent)) for p in leftovers)}): "
                         f"delete them, then rebuild (`make` / `pip install -e .`)")


def install() -> None:
    """At ``import pybroker``: the sources instead of the extensions when pure Python is asked for, else
    :func:`check`."""
    if pure_requested():
        if (PACKAGE_DIR.parent / "setup.py").exists():
            _refuse_leftovers(PACKAGE_DIR)
        if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _SourceFinder())
        return
    check()


def compiled_modules() -> list[str]:
    """The modules of :data:`COMPILED` that import (or were imported) as extensions."""
    found = []
    for module in COMPILED:
        loaded = sys.modules.get(module)
        origin = getattr(loaded, "__file__", None) if loaded is not None else None
        if loaded is None:
            spec = importlib.util.find_spec(module)
            origin = spec.origin if spec is not None else None
        if origin is not None and Path(origin).suffix in _NATIVE_SUFFIXES:
            found.append(module)
    return found


def describe() -> str:
    """The build for the start-up log: the compiled modules, or pure Python and why."""
    compiled = compiled_modules()
    if compiled:
        written = [module for module in C_EXTENSIONS if module in sys.modules or importlib.util.find_spec(module)]
        return (f"compiled (mypyc) {', '.join(compiled)}; the rest pure Python"
                + (f"; in C: {', '.join(written)}" if written else ""))
    if pure_requested():
        return f"pure Python ({PURE_ENV}=1)"
    return "pure Python (no compiled modules installed)"
