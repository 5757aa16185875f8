"""Where the command line connects, and its one line when it cannot (pure).

Every ``saltedtable`` command that talks to Bigtable takes ``--timeout``
(:data:`DEFAULT_TIMEOUT`): each request it sends, retries included, must end
within it. A request that cannot reach the endpoint, that gets no answer in
time, or that has no usable credentials ends the command with one line naming
the endpoint (:func:`endpoint_label`) or the credential source
(:func:`credential_source`): :func:`connection_failure` writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "CLOUD_ADMIN_ENDPOINT",
    "CLOUD_DATA_ENDPOINT",
    "DEFAULT_TIMEOUT",
    "connection_errors",
    "connection_failure",
    "credential_source",
    "data_timeouts",
    "endpoint_label",
]

#: Seconds each request of a command may take, retries included (``--timeout``).
DEFAULT_TIMEOUT: Final = 15.0
#: Where the data and admin clients connect without an emulator.
CLOUD_DATA_ENDPOINT: Final = "bigtable.googleapis.com:443"
CLOUD_ADMIN_ENDPOINT: Final = "bigtableadmin.googleapis.com:443"

_EMULATOR_ENV: Final = "BIGTABLE_EMULATOR_HOST"
_CREDENTIALS_ENV: Final = "GOOGLE_APPLICATION_CREDENTIALS"
#: The data client's own per-attempt defaults; a shorter ``--timeout`` caps them.
_ATTEMPT_DEFAULTS: Final = {
    "default_attempt_timeout": 20.0,
    "default_read_rows_attempt_timeout": 20.0,
    "default_mutate_rows_attempt_timeout": 60.0,
}


def data_timeouts(timeout: float | None) -> dict[str, Any]:
    """``get_table`` defaults under which every data request ends within ``timeout`` seconds.

    The client has three operation timeouts (read rows, mutate rows, the
    rest; ``read_row`` counts as a read of rows) and their attempts; all are
    capped. None: the client's own defaults (an empty dict).
    """
    if timeout is None:
        return {}
    out: dict[str, Any] = {name: min(v, timeout) for name, v in _ATTEMPT_DEFAULTS.items()}
    out.update(
        default_operation_timeout=timeout,
        default_read_rows_operation_timeout=timeout,
        default_mutate_rows_operation_timeout=timeout,
    )
    return out


def endpoint_label(environ: Mapping[str, str]) -> str:
    """The endpoint the clients connect to, as an error message names it."""
    host = environ.get(_EMULATOR_ENV)
    if host:
        return f"the Bigtable emulator at {host} (${_EMULATOR_ENV})"
    return f"Cloud Bigtable at {CLOUD_DATA_ENDPOINT} (admin: {CLOUD_ADMIN_ENDPOINT})"


def credential_source(environ: Mapping[str, str]) -> str:
    """Where the clients take their credentials from, as an error message names it."""
    path = environ.get(_CREDENTIALS_ENV)
    if path:
        return f"${_CREDENTIALS_ENV} ({path})"
    return (
        "the application default credentials (gcloud auth application-default login, "
        "or the metadata server)"
    )


def connection_errors() -> tuple[type[Exception], ...]:
    """The exception types :func:`connection_failure` describes (imported when asked)."""
    from google.api_core.exceptions import (
        DeadlineExceeded,
        RetryError,
        ServiceUnavailable,
        Unauthenticated,
    )
    from google.auth.exceptions import GoogleAuthError

    return (DeadlineExceeded, RetryError, ServiceUnavailable, Unauthenticated, GoogleAuthError)


def _first_line(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    if not (isinstance(message, str) and message) and exc.args and isinstance(exc.args[0], str):
        message = exc.args[0]  # google.auth's errors: (text, the error behind it)
    text = message if isinstance(message, str) and message else str(exc)
    line = " ".join(text.split())
    return line or type(exc).__name__


def _last_attempt(exc: BaseException) -> BaseException | None:
    """The last attempt's error behind a retried call that ran out of time, if known."""
    cause = getattr(exc, "cause", None) or exc.__cause__
    attempts = getattr(cause, "exceptions", None)  # the data client's RetryExceptionGroup
    if attempts:
        last = attempts[-1]
        return last if isinstance(last, BaseException) else None
    return cause if isinstance(cause, BaseException) else None


def connection_failure(
    exc: BaseException, *, timeout: float | None, environ: Mapping[str, str]
) -> str | None:
    """The one line for a request that could not reach Bigtable in time, or None.

    Args:
        exc: What the command raised.
        timeout: The command's ``--timeout`` (None: the client's defaults).
        environ: The environment the clients were made in (``os.environ``).

    Returns:
        A line naming the endpoint (unreachable, no answer in time, credentials
        refused) or the credential source (none usable); None for every other
        error, which the command reports itself.
    """
    from google.api_core.exceptions import (
        DeadlineExceeded,
        RetryError,
        ServiceUnavailable,
        Unauthenticated,
    )
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

    where = endpoint_label(environ)
    source = credential_source(environ)
    within = "" if timeout is None else f" within --timeout {timeout:g} s"
    if isinstance(exc, DefaultCredentialsError):
        return (
            f"no usable Google Cloud credentials in {source}: {_first_line(exc)} "
            f"(set {_EMULATOR_ENV} to use the emulator)"
        )
    if isinstance(exc, GoogleAuthError):
        return f"the credentials in {source} could not be used: {_first_line(exc)}"
    if isinstance(exc, Unauthenticated):
        return f"{where} refused the credentials in {source}: {_first_line(exc)}"
    if isinstance(exc, ServiceUnavailable):
        return f"cannot reach {where}: {_first_line(exc)}"
    if isinstance(exc, DeadlineExceeded | RetryError):
        last = _last_attempt(exc)
        if isinstance(last, ServiceUnavailable):
            return f"cannot reach {where}{within}: {_first_line(last)}"
        hint = ": the endpoint does not answer, or the request needs more time" if timeout else ""
        return f"a request to {where} did not finish{within}{hint}"
    return None
