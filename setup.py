"""The compiled build: mypyc turns pybroker.common.native.COMPILED into C extensions where a C compiler is
present and PYBROKER_PURE_PYTHON is not set, and the C modules of pybroker.common.native.C_EXTENSIONS (one
source file each, beside its module) are built with them; otherwise the same package installs as pure Python.
Everything else about the package is in pyproject.toml.

A compiler that is found but fails stops the install (no partial build is installed). mypyc's type check and C
generation (about 8 s) run when the extensions are built (`build_ext`), not each time a build front end reads this
file to ask for metadata or the sdist (`python -m build` reads it four times, `pip install -e .` three).
"""

from __future__ import annotations

import os
import runpy
import shutil
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
NATIVE = runpy.run_path(str(HERE / "pybroker" / "common" / "native.py"))


def c_compiler() -> str | None:
    """The C compiler CPython was built with (or $CC), if it is on this machine."""
    configured = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(configured.split()[0])


def compiling() -> bool:
    if NATIVE["pure_requested"]() or sysconfig.get_config_var("Py_GIL_DISABLED") or c_compiler() is None:
        return False
    try:
        import mypyc.build  # noqa: F401
    except ImportError:  # mypy is a build requirement only on CPython (pyproject.toml)
        return False
    return True


def written_extensions() -> list[Extension]:
    """The C modules written by hand; listed in setup() whenever the build compiles, so that the wheel is tagged
    for this platform and their sources go in the sdist."""
    return [Extension(module, [str(Path(*module.split(".")).with_suffix(".c"))]) for module in NATIVE["C_EXTENSIONS"]]


def mypyc_extensions() -> list[Extension]:
    from mypyc.build import mypycify

    paths = [str(Path(*module.split(".")).with_suffix(".py")) for module in NATIVE["COMPILED"]]
    # The build environment has none of pybroker's dependencies: their types are Any (the modules compiled
    # here call them through Python), and the modules not compiled are type-checked by the test suite.
    flags = ["--ignore-missing-imports", "--follow-imports=silent"]
    return list(mypycify([*flags, *paths], group_name=NATIVE["GROUP"].removesuffix("__mypyc"), opt_level="3"))


class BuildExt(build_ext):
    """Adds mypyc's extensions to the written ones when the extensions are built."""

    def finalize_options(self) -> None:
        if compiling():
            self.distribution.ext_modules = [*mypyc_extensions(), *written_extensions()]
        super().finalize_options()


# The C sources go in the sdist (setuptools adds an extension's sources) but not in the wheel, which holds them built.
setup(ext_modules=written_extensions() if compiling() else [], cmdclass={"build_ext": BuildExt},
      exclude_package_data={"": ["*.c"]})
