"""The names of a partition directory's segment files (Kafka ``LogFileUtils``).

A segment's files are named by its base offset zero-padded to 20 digits (``00000000000000368769.log``)
and a suffix per file. Files in flight carry a second suffix behind their own: ``.deleted`` on the way out,
``.cleaned`` while the cleaner writes them and ``.swap`` while they replace the segments they were cleaned
from (``loader.py`` finishes or removes them at the next open).
"""

from __future__ import annotations

__all__ = ["LOG_SUFFIX", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "TXN_INDEX_SUFFIX", "DELETED_SUFFIX", "CLEANED_SUFFIX",
           "SWAP_SUFFIX", "filename_prefix", "offset_from_filename"]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def filename_prefix(offset: int) -> str:
    """``offset`` zero-padded to 20 digits (Kafka ``LogFileUtils.filenamePrefixFromOffset``)."""
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    """Base offset encoded in a segment file name; ValueError when it is not one."""
    prefix = name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"{name!r} is not a segment file name")
    return int(prefix)
