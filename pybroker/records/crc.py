"""CRC-32C (Castagnoli), the checksum of v2 record batches (Kafka's ``Crc32C``), from the crc32c package.

The package's ``__init__`` reads its own version with importlib.metadata (which loads email, csv and zipfile)
and imports its command line (argparse): ~1.6 MiB of an idle broker's resident memory for one function. So the
package's compiled module is loaded by itself; a crc32c release laid out otherwise gets the package import.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from typing import Callable

Buffer = bytes | bytearray | memoryview
_EXTENSION = "crc32c._crc32c"


def _extension_path() -> str | None:
    package = importlib.util.find_spec("crc32c")  # finds the package without running its __init__
    directories = package.submodule_search_locations if package is not None else None
    for directory in directories or ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(directory, _EXTENSION.rpartition(".")[2] + suffix)
            if os.path.isfile(path):
                return path
    return None


def _load() -> Callable[[Buffer], int]:
    path = _extension_path()
    if path is None:
        import crc32c

        return crc32c.crc32c
    loader = importlib.machinery.ExtensionFileLoader(_EXTENSION, path)
    module = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(_EXTENSION, loader, origin=path))
    loader.exec_module(module)
    function: Callable[[Buffer], int] = module.crc32c
    return function


#: CRC-32C of a buffer, as an unsigned int
crc32c = _load()
