"""How a log reports an I/O error of its files (Kafka's ``LocalLog.maybeHandleIOException``).

The error becomes a ``LogStorageError`` (an ``OSError`` is wrapped, its cause kept) and is told to the log's
``storage_error_listener`` before it propagates: the ``LogManager`` then takes the log dir offline, as Kafka's
``LogDirFailureChannel`` does. ``SliceUnavailableError`` (a read of a log deleted meanwhile) is not told.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol, TypeVar, cast

from pybroker.log.errors import LogStorageError, SliceUnavailableError

__all__ = ["ReportingLog", "reported", "reports_storage_errors"]

_Method = TypeVar("_Method", bound=Callable[..., Any])


class ReportingLog(Protocol):
    """What reporting needs of a log: ``PartitionLog`` (which imports this module, so it is not named here)."""

    @property
    def dir(self) -> str: ...

    storage_error_listener: Callable[[Any, LogStorageError], None] | None


def reports_storage_errors(method: _Method) -> _Method:
    """An I/O error of the log's files (an OSError becomes LogStorageError) is reported to the log's
    ``storage_error_listener`` before it propagates."""

    @functools.wraps(method)
    def reporting(self: ReportingLog, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (LogStorageError, OSError) as exc:
            error = reported(self, exc)
            if error is exc:
                raise
            raise error from exc

    return cast(_Method, reporting)


def reported(log: ReportingLog, exc: LogStorageError | OSError) -> LogStorageError:
    """``exc`` as a LogStorageError, told to the log's ``storage_error_listener`` (see `reports_storage_errors`,
    which the append path, run per Produce, does inline)."""
    error = exc if isinstance(exc, LogStorageError) else LogStorageError(f"I/O error in {log.dir}: {exc}")
    if error is not exc:
        error.__cause__ = exc  # the listener tells a full descriptor table from a failed disk by it
    if log.storage_error_listener is not None and not isinstance(error, SliceUnavailableError):
        log.storage_error_listener(log, error)
    return error
