"""Which build runs (common/native.py): the one asked for, whole; a compiled set that cannot run here (built
for another Python, partial, older than its sources) is refused at `import pybroker` with the fix, and
PYBROKER_PURE_PYTHON=1 runs the sources whatever is built."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pybroker
from pybroker.common import native
from pybroker.common.native import C_EXTENSIONS, COMPILED, GROUP, PURE_ENV, BuildError, check, compiled_modules

PACKAGE = Path(pybroker.__file__).parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
FOREIGN = ".cpython-39-x86_64-linux-gnu.so"  # what a build for another Python leaves beside the sources


def test_the_build_loaded_is_the_one_asked_for() -> None:
    """`make test` runs the suite with PYBROKER_EXPECT_BUILD=compiled and the pure run with PYBROKER_PURE_PYTHON=1;
    a plain run imports whatever is built, but never part of it."""
    modules = [importlib.import_module(name) for name in COMPILED]
    compiled = compiled_modules()
    if native.pure_requested() or os.environ.get("PYBROKER_EXPECT_BUILD") == "pure":
        assert compiled == [] and all(module.__file__.endswith(".py") for module in modules)
    elif os.environ.get("PYBROKER_EXPECT_BUILD") == "compiled":
        assert compiled == list(COMPILED) and not any(module.__file__.endswith(".py") for module in modules)
    else:
        assert compiled in ([], list(COMPILED))
    assert native.describe().startswith("compiled (mypyc) " if compiled else "pure Python")


def package_tree(root: Path, suffix: str | None, modules: tuple[str, ...] = COMPILED, group: bool = True) -> Path:
    """A copy of the package's sources under ``root`` with empty extension files of ``suffix`` for ``modules``."""
    package = root / "pybroker"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
    if suffix is not None:
        for name in modules:
            source = package.joinpath(*name.split(".")[1:])
            source.with_name(source.name + suffix).write_bytes(b"")
        if group:
            (root / (GROUP + suffix)).write_bytes(b"")
    return package


def test_a_pure_tree_passes(tmp_path: Path) -> None:
    check(package_tree(tmp_path, None))


def test_a_build_for_another_python_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"built for another Python \(primitives\.cpython-39.*reinstall pybroker "
                                         rf"with this Python.*{PURE_ENV}=1"):
        check(package_tree(tmp_path, FOREIGN))


def test_a_partial_build_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=rf"partial \(no {re.escape(COMPILED[-1])} for this Python\)"):
        check(package_tree(tmp_path, SUFFIX, modules=COMPILED[:-1]))


def test_a_build_without_its_shared_library_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=rf"partial \(no {GROUP} for this Python\)"):
        check(package_tree(tmp_path, SUFFIX, group=False))


def test_a_checkout_built_before_its_sources_changed_is_refused(tmp_path: Path) -> None:
    package = package_tree(tmp_path, SUFFIX)
    check(package)  # installed: the files' times say nothing
    (tmp_path / "setup.py").write_text("")
    source = package / "records" / "varint.py"
    built = (tmp_path / (GROUP + SUFFIX)).stat().st_mtime
    os.utime(source, (built + 10, built + 10))
    with pytest.raises(BuildError, match=r"older than their sources \(pybroker\.records\.varint\)"):
        check(package)


def _serve(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != PURE_ENV}
    return subprocess.run([sys.executable, "-m", "pybroker", "serve", "--help"], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**environment, "PYTHONPATH": str(root), **env})


def test_serve_names_the_fix_and_pure_python_runs_the_sources(tmp_path: Path) -> None:
    package_tree(tmp_path, FOREIGN)
    refused = _serve(tmp_path)
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].startswith("pybroker.common.native.BuildError: pybroker's "
                                                              "compiled modules were built for another Python")
    assert f"{PURE_ENV}=1" in refused.stderr
    served = _serve(tmp_path, **{PURE_ENV: "1"})
    assert served.returncode == 0, served.stderr
    assert "usage:" in served.stdout


def test_a_checkouts_extension_of_a_module_no_longer_compiled_is_refused_by_both_builds(tmp_path: Path) -> None:
    """Dropping a module from the compiled list leaves its extension beside the source, and a rebuild does not
    remove it: Python would import it instead of the source, in either build, unless refused."""
    package = package_tree(tmp_path, SUFFIX)
    leftover = package / "log" / ("segment" + SUFFIX)
    leftover.write_bytes(b"")
    check(package)  # installed: a wheel holds only what its build compiled
    (tmp_path / "setup.py").write_text("")
    with pytest.raises(BuildError, match=r"no longer compiled \(pybroker/log/segment\..*\): delete them"):
        check(package)
    for env in ({}, {PURE_ENV: "1"}):
        refused = _serve(tmp_path, **env)
        assert refused.returncode != 0 and "no longer compiled" in refused.stderr, env
    leftover.unlink()
    check(package)


def test_a_c_module_built_for_another_python_or_missing_leaves_its_caller_on_the_compiled_python(
        tmp_path: Path) -> None:
    """The C modules (C_EXTENSIONS) are optional: a checkout holding one for another Python passes (its caller
    imports nothing and runs the mypyc code), and neither build takes it for a leftover."""
    package = package_tree(tmp_path, SUFFIX)
    (tmp_path / "setup.py").write_text("")
    check(package)  # none built at all
    for name in C_EXTENSIONS:
        source = package.joinpath(*name.split(".")[1:])
        source.with_name(source.name + FOREIGN).write_bytes(b"")
    check(package)
    assert _serve(tmp_path, **{PURE_ENV: "1"}).returncode == 0


def test_a_checkouts_c_module_built_before_its_source_changed_is_refused(tmp_path: Path) -> None:
    package = package_tree(tmp_path, SUFFIX)
    (tmp_path / "setup.py").write_text("")
    [name] = C_EXTENSIONS
    source = package.joinpath(*name.split(".")[1:])
    built = source.with_name(source.name + SUFFIX)
    built.write_bytes(b"")
    check(package)
    os.utime(source.with_suffix(".c"), (built.stat().st_mtime + 10, built.stat().st_mtime + 10))
    with pytest.raises(BuildError, match=rf"older than their sources \({re.escape(name)}\)"):
        check(package)
