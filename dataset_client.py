"""Synchronous client for the dataset query/export service: 3.11+, stdlib only.

Copy ``dataset_client.py`` into your tree; ``dataset_client_cli.py`` beside
it is the ``dataset-client`` command (``pip install`` gives both).

Errors about a request derive from ``DatasetClientError`` and a built-in::

    DatasetClientError
    ├── ServiceError (RuntimeError)         the service answered >= 400
    ├── RequestTimeoutError (TimeoutError)  timed out, deadline, stalled
    ├── NetworkError (ConnectionError)      refused, reset, TLS failed
    │   └── IncompleteResponseError         a body cut short
    ├── InvalidResponseError (ValueError)   a body or framing refused
    ├── ChecksumMismatchError (ValueError)  sha256 or digest differ
    └── ClientClosedError (RuntimeError)    used after (or during) close()

Bad arguments raise ``TypeError``/``ValueError`` before anything is sent
(the service judges ``format`` and each symbol: ``"A,B"`` is one); file
errors: ``OSError``. Licence: MIT. (c) 2026 the dataset-client authors.

The file's regions, each under a banner, in the order a call flows::

    The public face: the imports, shared limits, the errors, DatasetClient
    The request pipeline: a call, its retries, redirects, the send, origins
    Bodies and decoding: framing, limits, gzip, JSON; a ServiceError made
    Secrets and redaction: _Secret, _Secrets; what is never shown (_escaped)
    Messages and the log: a request, a size, a long text named; _logger
    The deadline and the stall watch: _Deadline (one a call), _Watch
    Connections and the pool: _ConnectionPool, _PooledResponse, its errors
    Proxies and TLS trust: HTTP(S)_PROXY and NO_PROXY, a 407; CAs trusted
    The download engine: _Transfer, _Parts, _Acceptance, _Checks, _Digest
    Sinks: _FileTarget (committed over the destination), streams, reordering
    Safe file operations: links, own files, temporaries, locks, state files
    Argument checks: each argument checked before anything is sent
    Configuration: the variables, the config file and its profiles
    The command line's entry: main() runs dataset_client_cli.py
"""

# ============================================================================
# The public face
# ============================================================================

from __future__ import annotations

import sys

if sys.version_info < (3, 11):  # noqa: UP036 (one clear line, not an error from inside)
    _TOO_OLD = "dataset_client needs Python 3.11 or later; this is Python {}.{}.{}".format(
        *sys.version_info[:3]
    )
    if __name__ == "__main__":
        sys.stderr.write(f"dataset-client: error: {_TOO_OLD}\n")
        raise SystemExit(2)
    raise ImportError(_TOO_OLD)

# _thread, not threading: threading is imported off the import path, where a thread starts.
import _thread
import collections.abc
import contextlib
import datetime
import email.utils
import errno
import functools
import hashlib
import http.client
import io
import itertools
import json
import os
import random
import re
import select
import shutil
import socket
import ssl
import stat
import time
import urllib.parse
import urllib.request
import weakref
import zlib

TYPE_CHECKING = False
# For the type checker only: importing typing would cost every import.
if TYPE_CHECKING:
    import queue
    import threading
    from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping
    from typing import Any, BinaryIO, NoReturn, TypeVar

    _T = TypeVar("_T")
    _E = TypeVar("_E", bound=BaseException)
    _PoolKey = tuple[str, str, str | None]
    _Progress = Callable[[int, int | None], object]
    _Hold = Callable[[socket.socket], None]


__all__ = (
    "ChecksumMismatchError",
    "ClientClosedError",
    "DatasetClient",
    "DatasetClientError",
    "IncompleteResponseError",
    "InvalidResponseError",
    "NetworkError",
    "RequestTimeoutError",
    "ServiceError",
    "__version__",
)

__version__ = "1.1.0"

_DEFAULT_USER_AGENT = "dataset-client/{} Python/{}.{}.{}".format(__version__, *sys.version_info[:3])
# Bytes read at once: 1 MiB reads measured faster than 64 KiB ones.
_CHUNK_SIZE = 1024 * 1024
_ERROR_BODY_LIMIT = 64 * 1024
_MAX_CONNECTIONS = 32
_MAX_WAIT = float(_thread.TIMEOUT_MAX)
_MAX_SIZE = 2**63 - 1

# Platform features, probed once (Windows: none; .ci/without_posix_extras.py).
_WINDOWS = os.name == "nt"
_HAS_PWRITE = hasattr(os, "pwrite") and hasattr(os, "pread")
_HAS_FORK_HOOKS = hasattr(os, "register_at_fork")
# Without geteuid (Windows), every file is taken for the user's own.
_HAS_GETEUID = hasattr(os, "geteuid")
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_PATH = getattr(os, "O_PATH", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NOT_FOLLOWED = "refusing to follow a symbolic link another user made"


@functools.cache
def _fcntl() -> Any:
    try:
        import fcntl
    except ImportError:
        return None
    return fcntl


class DatasetClientError(Exception):
    """Base of the client's errors about a request. Fields (keyword arguments):
    ``method``, ``url``, ``connecting`` (never sent), ``attempts``, its own."""

    method: str = ""
    url: str = ""
    connecting: bool = False
    attempts: int = 1

    def __init__(self, text: str = "", /, **fields: Any):
        super().__init__(text)
        known = {
            name for cls in type(self).__mro__ for name in vars(cls).get("__annotations__", ())
        }
        unknown = fields.keys() - known
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {min(unknown)!r}")
        vars(self).update(fields)

    def __str__(self) -> str:
        return self.worded()

    def worded(self, **words: str) -> str:
        """The message, what it names (``named``) in ``words`` instead:
        ``worded(deadline="--max-time 5")`` for ``the deadline of 5 s``."""
        parts = list(vars(self).get("parts") or [super().__str__()])
        for name, index in vars(self).get("named", {}).items():
            parts[index] = words.get(name, parts[index])
        text = "".join(parts)
        attempts = self.attempts
        if attempts == 1 and getattr(self, "deadline", None) is None:
            return text
        return f"{text} (after {attempts} attempt{'' if attempts == 1 else 's'})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuilt_error, (type(self), self.args, {**vars(self), "__cause__": self.__cause__})


def _rebuilt_error(
    cls: type[DatasetClientError], args: tuple[Any, ...], state: dict[str, Any], payload: str = ""
) -> DatasetClientError:
    error = cls.__new__(cls, *args)
    # OSError's __new__ leaves the arguments to __init__, not called here.
    error.args = args
    error.__setstate__(state)
    if payload:
        error.payload = json.loads(payload)  # type: ignore[attr-defined]
    return error


def _named(kind: Callable[..., _E], *pieces: str | tuple[str, str], **fields: Any) -> _E:
    """``kind(text, **fields)``, ``text`` joined from ``pieces`` (``(name, words)``: see worded)."""
    parts = [piece if isinstance(piece, str) else piece[1] for piece in pieces]
    error = kind("".join(parts), **fields)
    error.parts = parts  # type: ignore[attr-defined]
    named = {piece[0]: at for at, piece in enumerate(pieces) if not isinstance(piece, str)}
    error.named = named  # type: ignore[attr-defined]
    return error


class ServiceError(DatasetClientError, RuntimeError):
    """The service answered >= 400, or a 3xx was left after redirects:
    ``404 Not Found: GET URL: message``. Fields: ``status``, ``reason``,
    ``headers``, ``body`` (its start), ``payload`` (JSON or None), ``message``
    (the service's), ``request_id``, ``retry_after`` (seconds), ``proxy``."""

    status: int
    reason: str
    headers: http.client.HTTPMessage
    body: str
    payload: Any
    message: str | None
    request_id: str | None
    retry_after: float | None
    proxy: str | None

    def __init__(
        self,
        status: int,
        reason: str,
        method: str,
        url: str,
        *,
        headers: http.client.HTTPMessage | None = None,
        body: str = "",
        message: str | None = None,
        proxy: str | None = None,
    ):
        headers = http.client.HTTPMessage() if headers is None else headers
        try:
            payload = json.loads(body) if body.strip() else None
        except (ValueError, RecursionError):
            payload = None
        message = message or _message_of(payload, body)
        text = f"{status} {reason}: {_request_name(method, url, proxy)}"
        text = f"{text}: {message}" if message else text
        request_id = headers.get("X-Request-Id") or headers.get("Request-Id")
        retry_after = _parse_retry_after(headers.get("Retry-After"))
        fields = dict(status=status, reason=reason, headers=headers, body=body, payload=payload)
        fields.update(message=message, request_id=request_id, retry_after=retry_after, proxy=proxy)
        super().__init__(text, method=method, url=url, **fields)

    def __reduce__(self) -> tuple[Any, ...]:
        # As JSON text (pickle recurses deeper), unless json cannot write it.
        rebuilt, (cls, args, state) = super().__reduce__()
        with contextlib.suppress(ValueError, TypeError, RecursionError):
            return rebuilt, (cls, args, {**state, "payload": None}, json.dumps(self.payload))
        return rebuilt, (cls, args, state)


class RequestTimeoutError(DatasetClientError, TimeoutError):
    """A wait outlasted ``timeout``, a call its ``deadline`` (set; ``retry_after``
    if the server asked to wait past it), or a download fell below ``min_rate``."""

    deadline: float | None = None
    retry_after: float | None = None
    # Below min_rate: retried, and its bytes are never counted as progress.
    _stalled: bool = False


class NetworkError(DatasetClientError, ConnectionError):
    """Refused, reset, cut, or TLS failed (``certificate``: the server's refused)."""

    certificate: bool = False
    # A server speaking the other scheme fails so: the pipeline asks it once.
    _scheme_in_doubt: bool = False


class IncompleteResponseError(NetworkError):
    """The connection closed before the whole body (``expected`` bytes) arrived."""

    expected: int | None = None
    received: int = 0


class InvalidResponseError(DatasetClientError, ValueError):
    """A 2xx body not JSON, a bad redirect, range or framing; ``received``,
    ``expected``: a download's size and the announced one."""

    received: int | None = None
    expected: int | None = None


class ChecksumMismatchError(DatasetClientError, ValueError):
    """The digest is ``actual``, not ``expected`` (``sha256``, or the server's)."""

    method = "GET"
    expected: str = ""
    actual: str = ""


class ClientClosedError(DatasetClientError, RuntimeError):
    """The client was used after ``close()``, or closed while a call was running."""


_CLOSED = "the DatasetClient is closed"


def _rebuilt_client(
    cls: type[DatasetClient], arguments: dict[str, Any], closed: bool
) -> DatasetClient:
    # ca_bundle read at the first request, not in pickle.loads (a worker may lack it).
    client = cls(**{**arguments, "ca_bundle": None})
    client._arguments["ca_bundle"] = client._pool.ca_bundle = arguments["ca_bundle"]
    if closed:
        client.close()
    return client


def _as_secret(value: Any) -> Any:
    if isinstance(value, str):
        return _Secret(value)
    if isinstance(value, collections.abc.Mapping):
        return {k: _Secret(v) if isinstance(v, str) else v for k, v in value.items()}
    return value


class DatasetClient:
    """A client for one service, which threads may share.

    ``api_key`` and ``headers`` go to ``base_url``'s origin only; ``timeout``
    bounds connecting and each wait, ``deadline`` a whole call; ``ca_bundle``:
    CAs trusted besides the system's. A copy or pickle (holding the key) is a
    new client, same settings; one with an ``ssl_context`` does not pickle."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float | None = 30.0,
        max_retries: int = 2,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        user_agent: str | None = None,
        deadline: float | None = None,
        backoff_factor: float = 0.5,
        ca_bundle: str | os.PathLike[str] | None = None,
    ):
        # As _Secret first: no traceback's locals show a secret.
        api_key = _as_secret(api_key)
        headers = _as_secret(headers)
        self._base_url, self._origin = _parse_base_url(base_url)
        if timeout is not None:
            timeout = _check_number(timeout, "timeout", positive=True, none=True)
            timeout = min(float(timeout), _MAX_WAIT)
        self._timeout = timeout
        self._deadline = _check_positive(deadline, "deadline")
        self._max_retries = int(_check_number(max_retries, "max_retries", whole=True))
        self._backoff_factor = float(_check_number(backoff_factor, "backoff_factor"))
        context, ca_bundle = _checked_trust(ssl_context, ca_bundle)
        agent = _DEFAULT_USER_AGENT if user_agent is None else user_agent
        agent = _check_header_value(agent, "user_agent")
        self._credentials = extra = _check_headers(headers)
        if api_key is not None:
            _check_header_value(api_key, "api_key", token=True)
            key = {"Authorization": _Secret(f"Bearer {api_key}")}
            self._credentials = _merge_headers(key, extra)
        self._arguments: dict[str, Any] = dict(base_url=base_url, api_key=api_key, headers=extra)
        self._arguments.update(timeout=timeout, max_retries=self._max_retries, user_agent=agent)
        self._arguments.update(ssl_context=ssl_context, backoff_factor=self._backoff_factor)
        self._arguments.update(ca_bundle=ca_bundle, deadline=self._deadline)
        service = {"User-Agent": agent, "Accept": "application/json", "Accept-Encoding": "gzip"}
        self._download_headers = {**service, "Accept": "*/*", "Accept-Encoding": "identity"}
        self._trusted_download_headers = _merge_headers(self._download_headers, self._credentials)
        self._service_headers = _merge_headers(service, self._credentials)
        self._pool = _ConnectionPool(context)
        proxies = _ProxyHandler()
        self._opener = urllib.request.OpenerDirector()
        self._opener.add_handler(proxies)
        self._opener.add_handler(self._pool)
        self._proxies: dict[str, str] = proxies.proxies  # type: ignore[attr-defined]
        self._secrets = _secret_texts([api_key or "", *extra.values()], self._proxies)
        if api_key is not None and self._origin[0] == "http" and not _is_loopback(self._origin[1]):
            clear = "the API key goes to %s over plain http://: it travels in clear (use https://)"
            _logger().warning(clear, self._origin[1], extra={"lasting": True})

    def __repr__(self) -> str:
        # Also for a client whose constructor failed (in a traceback's locals).
        closed = " (closed)" if getattr(self, "_pool", None) and self._pool.closed else ""
        return f"<DatasetClient {getattr(self, '_base_url', '?')!r}{closed}>"

    def __reduce__(self) -> tuple[Any, ...]:
        if self._arguments["ssl_context"] is not None:
            raise TypeError(
                "a DatasetClient given an ssl_context cannot be pickled (an SSLContext cannot):"
                " pass ca_bundle=FILE instead of the context, or build the client in the worker"
            )
        return _rebuilt_client, (type(self), self._arguments, self._pool.closed)

    def __copy__(self, memo: object = None) -> DatasetClient:
        return _rebuilt_client(type(self), self._arguments, self._pool.closed)

    # The settings are immutable or copies already.
    __deepcopy__ = __copy__

    def __enter__(self) -> DatasetClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @classmethod
    def from_profile(cls, profile: str | None = None, **settings: Any) -> DatasetClient:
        """The client the command line builds: ``base_url`` and ``api_key`` from
        $DATASET_CLIENT_BASE_URL and $DATASET_CLIENT_API_KEY, else from the
        config file's profile ``profile`` (else $DATASET_CLIENT_PROFILE, else
        ``default``), as are ``timeout`` and ``ca_bundle``; ``settings`` beat
        both. Raises ValueError, PermissionError (a file others may write, or
        read with a key), LookupError (no such profile)."""
        found = _profile_settings(profile, settings)
        arguments = {name: value for name, (value, _) in found.items()}
        if not arguments.get("base_url"):
            raise ValueError(
                "no service address: set DATASET_CLIENT_BASE_URL, or give the profile in"
                f" {_config_path()} a base_url (or pass base_url)"
            )
        try:
            return cls(**arguments)
        except OSError as exc:
            named = getattr(exc, "named", {})
            if "ca_bundle" in settings or "ca_bundle" not in named:
                raise
            parts: list[str] = exc.parts  # type: ignore[attr-defined]
            parts[named["ca_bundle"]] = f"ca_bundle in {found['ca_bundle'][1]}"
            raise type(exc)(*exc.args[:-1], "".join(parts)) from None

    @classmethod
    def read_settings(
        cls, profile: str | None = None, **settings: Any
    ) -> dict[str, tuple[Any, str]]:
        """What ``from_profile`` builds its client with, each with where from:
        ``{"base_url": (URL, "DATASET_CLIENT_BASE_URL"), "timeout": (5,
        "[staging] in FILE"), ...}`` (``"argument"``: ``settings``); a
        profile's key meant for another base_url is ``None``."""
        return _profile_settings(profile, settings)

    @property
    def base_url(self) -> str:
        """The service address, without a trailing slash."""
        return self._base_url

    def close(self) -> None:
        """Close every connection, ending calls under way. Idempotent."""
        self._pool.close()

    def redact(self, text: _T, *, signed_urls: bool = True) -> _T:
        """``text`` (or a copy of a result, tuple, set or mapping), this client's
        secrets (key, headers, proxy passwords, in any form) as ``<redacted>``;
        ``signed_urls``: signed URLs' credentials too (False: a result's URLs
        keep working). TypeError for anything else."""
        secrets = self._secrets.shown() if signed_urls else self._secrets
        redacted: _T = _redact_value(text, secrets, strict=True)
        return redacted

    def resolve(self, download_url: str) -> str:
        """The URL ``download`` fetches for ``download_url`` (else ValueError)."""
        return _resolve_download_url(self._base_url, download_url)

    def list_datasets(self) -> Any:
        """``GET /datasets``; return the decoded JSON."""
        return self._call("GET", "/datasets")

    def query(self, sql: str) -> Any:
        """``POST /query`` with ``{"sql": sql}``; return the decoded JSON."""
        _check_text(sql, "sql")
        return self._call("POST", "/query", {"sql": sql})

    def create_export(
        self,
        dataset: str,
        *,
        symbols: str | Iterable[str],
        start_date: datetime.date | str,
        end_date: datetime.date | str,
        format: str = "parquet",
        idempotency_key: str | None = None,
    ) -> Any:
        """``POST /exports``; return the decoded JSON. ``symbols``: one or more;
        dates: ``datetime.date`` or str; ``idempotency_key`` (None: a new UUID)."""
        import uuid

        key = str(uuid.uuid4()) if idempotency_key is None else idempotency_key
        _check_header_value(key, "idempotency_key", token=True)
        _check_text(dataset, "dataset")
        _check_text(format, "format")
        iterable = isinstance(symbols, collections.abc.Iterable)
        if not iterable or isinstance(symbols, (bytes, bytearray, collections.abc.Mapping)):
            kind = type(symbols).__name__
            raise _refused("symbols", f"must be a str or an iterable of str, not {kind}", TypeError)
        checked = [symbols] if isinstance(symbols, str) else list(symbols)
        for index, symbol in enumerate(checked):
            _check_text(symbol, f"symbols[{index}]")
        if not checked:
            raise _refused("symbols", "must not be empty")
        start, end = _format_dates(start_date, end_date)
        body = dict(dataset=dataset, symbols=checked, start_date=start, end_date=end, format=format)
        return self._call("POST", "/exports", body, {"Idempotency-Key": key})

    def download(
        self,
        download_url: str,
        destination: str | os.PathLike[str] | BinaryIO,
        *,
        progress: _Progress | None = None,
        sha256: str | None = None,
        resume: bool = False,
        connections: int = 1,
        max_rate: float | None = None,
        deadline: float | None = None,
        min_rate: float | None = None,
        verified: Callable[[str], object] | None = None,
    ) -> None:
        """Stream ``download_url`` (relative: to ``base_url``) to ``destination``,
        a path (moved into place once checked) or a binary file object.

        ``progress(done, total)``: called as bytes arrive; ``sha256``: the hex
        digest to check; ``resume``: keep a failed download's partial file for
        next time; ``connections``: ranged requests at once; ``max_rate``: bytes
        a second; ``deadline``: seconds in all; ``min_rate``: bytes a second
        below which a connection is cut and resumed; ``verified(check)``: told
        each check passed (``"sha256"``, ``"Repr-Digest (sha-256)"``)."""
        seconds = self._deadline if deadline is None else _check_positive(deadline, "deadline")
        within = _NO_DEADLINE if seconds is None else _Deadline(seconds)
        limits = _Limits(min_rate, max_rate)
        url = _resolve_download_url(self._base_url, download_url)
        digest = _check_sha256(sha256)
        for name, function in (("progress", progress), ("verified", verified)):
            if function is not None and not callable(function):
                raise TypeError(f"{name} must be callable, not {type(function).__name__}")
        if not isinstance(resume, bool):
            raise TypeError(f"resume must be True or False, not {type(resume).__name__}")
        connections = int(_check_number(connections, "connections", whole=True, positive=True))
        if connections > _MAX_CONNECTIONS:
            raise _refused("connections", f"must be at most {_MAX_CONNECTIONS}")
        if self._pool.closed:
            raise ClientClosedError(_CLOSED)
        trusted = _origin_of(url) == self._origin
        headers = self._trusted_download_headers if trusted else self._download_headers
        redirects = self._send_handling_redirects
        send = functools.partial(redirects, "GET", url, None, deadline=within, trusted=trusted)
        retry = functools.partial(self._retrying, "GET", url, within)
        requests = _DownloadRequests(
            headers, within, send, retry, self._pool, self._secrets, self._timeout
        )
        in_time = functools.partial(_check_in_time, requests, url)
        with _open_target(destination, resume, in_time) as target:
            transfer = _Transfer(requests, url, target, progress, digest, connections, limits)
            transfer.run()
            target.commit(transfer.parts.total)
        if verified is not None:
            for check in transfer.checks.verified:
                verified(check + (" over plain HTTP" if transfer.in_clear else ""))

    # end of public API

    # ============================================================================
    # The request pipeline
    # ============================================================================

    def _call(
        self, method: str, path: str, payload: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        url = self._base_url + path
        body = None
        if payload is not None:
            try:
                body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
            except UnicodeEncodeError:
                text = "the request contains text that is not valid Unicode (a lone surrogate)"
                raise ValueError(text) from None
        sent = self._service_headers if headers is None else {**self._service_headers, **headers}
        deadline = _NO_DEADLINE if self._deadline is None else _Deadline(self._deadline)

        def attempt() -> Any:
            send = self._send_handling_redirects
            with send(method, url, body, sent, deadline, trusted=True) as response:
                return _read_json(response, self._secrets)

        return self._retrying(method, url, deadline, attempt)

    def _retrying(
        self,
        method: str,
        url: str,
        deadline: _Deadline,
        attempt: Callable[[], _T],
        progress: Callable[[], int] | None = None,
    ) -> _T:
        """``attempt()`` until done or failed for good; ``progress()`` renews retries."""
        attempts = 0
        retries_left = self._max_retries
        last_progress = 0 if progress is None else progress()
        while True:
            attempts += 1
            try:
                return attempt()
            except DatasetClientError as error:
                done = 0 if progress is None else progress()
                # Progress: a chunk, not a trickle; a stall counts whatever came.
                stalled = isinstance(error, RequestTimeoutError) and error._stalled
                if stalled or done - last_progress >= _CHUNK_SIZE:
                    last_progress = done
                    retries_left = retries_left if stalled else self._max_retries
                delay = self._retry_delay(method, error, attempts) if retries_left > 0 else None
                if isinstance(error, NetworkError) and error._scheme_in_doubt:
                    error, delay = self._probe_scheme(error, delay, deadline)
                error = self._failed(error, method, url)
                ended = deadline.stop(error, method, url, delay)
                if ended is not None:
                    error = ended
                    delay = None
                if delay is None:
                    error.attempts = attempts
                    raise error
                left = f"{retries_left} attempt{'' if retries_left == 1 else 's'} left"
                _logger().warning("retrying in %.1f s (%s): %s", delay, left, error)
                retries_left -= 1
                # close() ends the wait; _failed() raises ClientClosedError.
                self._pool.sleep(delay)
                if self._pool.closed:
                    error.attempts = attempts
                    self._failed(error, method, url)
            except BaseException as exc:
                # A bug's, a signal's, a callback's: no frame keeps a secret.
                _clear_library_frames(exc)
                raise

    def _failed(self, error: DatasetClientError, method: str, url: str) -> DatasetClientError:
        """``error`` redacted; ClientClosedError once close() ended the call."""
        _redact_error(error, self._secrets.shown())
        # Its frames go, key or not: their locals hold URLs (a signed Location).
        error = error.with_traceback(None)
        if self._pool.closed and not isinstance(error, ClientClosedError):
            shown = _showable_url(url, self._secrets)
            text = f"the DatasetClient was closed during {method} {shown}"
            raise ClientClosedError(text) from error
        return error

    def _probe_scheme(
        self, error: NetworkError, delay: float | None, deadline: _Deadline
    ) -> tuple[DatasetClientError, float | None]:
        """Ask an origin once if it speaks the other scheme: (error, wait left)."""
        left = deadline.left()
        if delay is not None and delay >= left:
            return error, delay
        limits = (_SCHEME_PROBE_TIMEOUT, self._timeout, delay, left)
        wait = min(limit for limit in limits if limit is not None)
        if wait <= 0 or not self._pool.first_probe(error.url):
            return error, delay
        parts = urllib.parse.urlsplit(error.url)
        # https:// failed its handshake: is the server plain HTTP? (http://: TLS?)
        plain = parts.scheme == "https"
        host = parts.hostname or ""
        port = parts.port or (443 if plain else 80)
        started = time.monotonic()
        try:
            if plain:
                answered = _speaks_plain_http(host, port, wait, self._pool.hold)
            else:
                answered = _speaks_tls(host, port, wait, self._pool.hold)
        except (OSError, ValueError, ClientClosedError):
            answered = False
        finally:
            self._pool.connected()
        if not answered:
            if delay is not None:
                delay = max(delay - (time.monotonic() - started), 0.0)
            return error, delay
        netloc = parts.netloc if parts.port else f"{parts.netloc}:{port}"
        other = "http" if plain else "https"
        instead = urllib.parse.urlunsplit(parts._replace(scheme=other, netloc=netloc))
        spoken = "plain HTTP, not HTTPS (TLS)" if plain else "HTTPS (TLS), not plain HTTP"
        text = f"{error.method} {error.url}: the server answered in {spoken}: use {instead} instead"
        wrong = _WrongSchemeError(
            text, method=error.method, url=error.url, connecting=error.connecting
        )
        wrong.__cause__ = error.__cause__
        return wrong, None

    def _retry_delay(self, method: str, error: DatasetClientError, attempts: int) -> float | None:
        # A redirect made the POST a GET: it was acted on.
        if error.method != method:
            return None
        if isinstance(error, ServiceError):
            if error.status not in _RETRIED_STATUSES[method]:
                return None
            if error.retry_after is not None:
                return error.retry_after if error.retry_after <= _MAX_RETRY_AFTER else None
        elif (
            not isinstance(error, (NetworkError, RequestTimeoutError))
            # The same certificate, proxy credentials or scheme, again.
            or isinstance(
                error.__cause__, (ssl.SSLCertVerificationError, _ProxyAuthenticationRequired)
            )
            or isinstance(error, _WrongSchemeError)
            # A POST that reached the server may have been acted on.
            or (method != "GET" and not error.connecting)
        ):
            return None
        delay = min(_MAX_BACKOFF, self._backoff_factor * 2.0 ** (attempts - 1))
        return delay / 2 + random.uniform(0, delay / 2)

    def _send_handling_redirects(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: dict[str, str],
        deadline: _Deadline,
        *,
        trusted: bool,
    ) -> _PooledResponse:
        """A 2xx response; ``trusted``: credentials in ``headers``, dropped off the origin."""
        hops = 0
        while True:
            # origin_req_host: else urlparse, for cookies.
            request = _Request(url, body, method=method, origin_req_host=self._origin[1])
            # Not add_header, which re-cases names; a copy: ProxyHandler adds to it.
            request.headers = (
                {**headers, "Content-Type": "application/json"} if body else dict(headers)
            )
            request.deadline = deadline
            response = self._send_single_request(request, url)
            status = response.status
            if status < 300:
                return response
            if status == 407 and response.proxy is not None and url.startswith("http:"):
                response.close()
                sent = "Proxy-Authorization" in request.headers
                said = "407 Proxy Authentication Required"
                error = _proxy_credentials_error(
                    response.method, response.url, response.proxy, "HTTP_PROXY", sent, said
                )
                error.__cause__ = _ProxyAuthenticationRequired(f"{status} {response.reason}")
                raise error
            redirect = status in {301, 302, 303, 307, 308}
            location = response.headers.get("Location") if redirect else None
            if location is None or hops == _MAX_REDIRECTS:
                too_many = location is not None
                raise _service_error(response, self._secrets, too_many_redirects=too_many)
            # A small body read keeps its connection; a large one closes it.
            with contextlib.suppress(DatasetClientError), response:
                response.read(_ERROR_BODY_LIMIT)
            try:
                # As urllib quotes it: a Location may carry spaces or non-ASCII.
                target = urllib.parse.urljoin(url, location.strip())
                target = urllib.parse.quote(target, safe=_ASCII_PUNCTUATION, encoding="iso-8859-1")
                url = urllib.parse.urlunsplit(_split_http_url(target, "the redirect's Location"))
            except ValueError as exc:
                text = f"{method} {url}: refusing to follow a redirect: {exc}"
                raise InvalidResponseError(text, method=method, url=url) from None
            # As browsers, requests and httpx do.
            if status == 303 or (status in (301, 302) and method == "POST"):
                method = "GET"
                body = None
            if trusted and _origin_of(url) != self._origin:
                trusted = False
                private = set(map(str.lower, self._credentials))
                headers = {k: v for k, v in headers.items() if k.lower() not in private}
            hops += 1

    def _send_single_request(self, request: _Request, url: str) -> _PooledResponse:
        method = request.method
        started = time.monotonic()
        if request.type in self._proxies:
            response: _PooledResponse = self._opener.open(request, timeout=self._timeout)
        else:
            # The opener would only pass it on, telling audit hooks (PEP 578).
            sys.audit("urllib.Request", url, request.data, request.headers, method)
            request.timeout = self._timeout
            response = self._pool.handle_request(request)
        # A DEBUG line (-v), without importing logging (twice this module's cost).
        if "logging" in sys.modules and _logger().isEnabledFor(_DEBUG):
            ms = 1e3 * (time.monotonic() - started)
            reason = self._secrets.shown().redact(response.reason)
            shown = _showable_url(url, self._secrets)
            _logger().debug("%s %s: %d %s (%.0f ms)", method, shown, response.status, reason, ms)
        return response


_MAX_REDIRECTS = 10
_MAX_RETRY_AFTER = 60.0
_LONGEST_RETRY_AFTER = 366 * 86400.0
_MAX_BACKOFF = 30.0
_SCHEME_PROBE_TIMEOUT = 5.0
# Retried statuses: for a POST, only those saying it was not acted on.
_RETRIED_STATUSES = {"GET": frozenset((429, 502, 503, 504)), "POST": frozenset((429, 503))}


class _WrongSchemeError(NetworkError):
    """https:// to a plain HTTP server, or http:// to TLS."""


def _speaks_plain_http(host: str, port: int, timeout: float, hold: _Hold) -> bool:
    """Whether ``OPTIONS *`` (RFC 9110 9.3.7) is answered in plain HTTP."""
    within = _Deadline(timeout)
    with _connect_within(within, hold, (host, port), timeout) as sock:
        sock.sendall(b"OPTIONS * HTTP/1.0\r\n\r\n")
        received = b""
        for _ in range(5):
            sock.settimeout(max(within.left(), 0.001))
            chunk = sock.recv(5 - len(received))
            received += chunk
            if not chunk or len(received) == 5:
                break
        return received == b"HTTP/"


def _speaks_tls(host: str, port: int, timeout: float, hold: _Hold) -> bool:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    within = _Deadline(timeout)
    with _connect_within(within, hold, (host, port), timeout) as sock:
        sock.settimeout(max(within.left(), 0.001))
        with context.wrap_socket(sock, server_hostname=host or None):
            return True


def _parse_retry_after(value: str | None) -> float | None:
    """Delay-seconds or an HTTP date (RFC 9110 10.2.3), in seconds."""
    value = (value or "").strip()
    if value.isascii() and value.isdigit():
        return min(float(value), _LONGEST_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    seconds = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    return min(max(0.0, seconds), _LONGEST_RETRY_AFTER)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    parts = host.split(".")
    if len(parts) == 4 and all(
        part.isascii() and part.isdigit() and int(part) < 256 for part in parts
    ):
        # Without ipaddress: its import costs more than this module's.
        return parts[0] == "127"
    if ":" not in host:
        return False
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin_of(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


# ============================================================================
# Bodies and decoding
# ============================================================================

_MAX_DECODED_BODY = 256 * 1024 * 1024


def _check_framing(response: _PooledResponse) -> None:
    """Refuse a cut head (see _read_status) or an ambiguous length (RFC 9112 6.3); note encoding."""
    head: Any = response.fp
    if isinstance(head, _HeadReader):
        response.fp = head.raw
        if head.cut:
            response.close()
            raise response.mapped_error(_HeadCutOff())
    lengths = []
    for name, value in response.headers.raw_items():
        name = name.lower()
        if name == "content-length":
            lengths.append(value)
        elif name == "content-encoding":
            response.encoding = value.strip().lower()
    if lengths and not response.chunked and (len(lengths) > 1 or response.length is None):
        response.close()
        raise _invalid(response, f"ambiguous Content-Length {_shortened(', '.join(lengths))}")
    if response.length is not None and response.length > _MAX_SIZE:
        response.close()
        raise _invalid(response, f"Content-Length {_shortened(lengths[0])} is larger than any file")


def _read_json(response: _PooledResponse, secrets: _Secrets) -> Any:
    data = _read_body(response, _MAX_DECODED_BODY)
    if not data or data.isspace():
        return None
    # For the error below (a secret across the cut redacted whole, then cut).
    start = data[: 200 + secrets.longest]
    # Decoded as json.loads does, the bytes let go first: twice the body in memory, not 3.
    try:
        text = data.decode(json.detect_encoding(data), "surrogatepass")
        del data
        return json.loads(text)
    # The cause kept without the body the one raised holds.
    except json.JSONDecodeError as exc:
        cause: ValueError = json.JSONDecodeError(exc.msg, "", 0)
        cause.args = exc.args
        vars(cause).update(pos=exc.pos, lineno=exc.lineno, colno=exc.colno)
    except (ValueError, RecursionError) as exc:
        cause = ValueError(str(exc))
    content_type = response.headers.get("Content-Type", "no content type")
    start = _redact_value(start, secrets)[:200]
    text = f"{response.status} response is not JSON ({content_type}): {start!r}"
    # Raised outside the except clause: the one caught (body and all) would be its context.
    raise _invalid(response, text) from cause


def _read_body(response: _PooledResponse, limit: int, *, truncate: bool = False) -> bytes:
    """The body, gzip undone, at most ``limit`` bytes (``truncate``: cut, not refused)."""
    identity = response.encoding == "identity"
    most = _CHUNK_SIZE if truncate and not identity else limit
    raw = _read_at_most(response, most, truncate=truncate)
    if identity:
        return raw
    if response.encoding not in ("gzip", "x-gzip", "deflate"):
        raise _invalid(response, f"unsupported Content-Encoding {response.encoding!r}")
    pieces: list[bytes] = []
    try:
        inflated = _inflate_members(memoryview(raw), limit, pieces)
    except zlib.error as exc:
        if not truncate:
            raise _invalid(response, f"cannot decode the {response.encoding} body: {exc}") from exc
        inflated = sum(map(len, pieces))
    if inflated > limit and not truncate:
        bomb = f"the body inflates past {_size(limit)}: refused as a decompression bomb"
        raise _invalid(response, bomb)
    del raw
    return b"".join(pieces)[:limit]


def _inflate_members(data: memoryview, limit: int, decoded: list[bytes]) -> int:
    """Inflate gzip members onto ``decoded`` (to ``limit + 1`` bytes); how many."""
    offset = inflated = 0
    while offset < len(data):
        decoder = zlib.decompressobj(wbits=47)
        size = 512
        while not decoder.eof:
            if offset >= len(data):
                raise zlib.error("the compressed data ends early")
            piece = data[offset : offset + size]
            decoded.append(decoder.decompress(piece, limit + 1 - inflated))
            inflated += len(decoded[-1])
            if inflated > limit:
                return inflated
            offset += len(piece) - len(decoder.unused_data)
            # Small pieces first: zlib copies a piece's rest.
            size = min(size * 2, _CHUNK_SIZE)
    return inflated


def _read_at_most(response: _PooledResponse, limit: int, *, truncate: bool = False) -> bytes:
    """The body as sent, at most ``limit`` bytes; more refused unread (or cut)."""
    if response.length is not None and response.length <= limit:
        return response.read()
    refused = f"a body of more than {_size(limit)}: refused"
    if response.length is not None and not truncate:
        raise _invalid(response, refused)
    pieces: list[bytes] = []
    size = 0
    while size <= limit:
        wanted = min(64 * 1024, limit + 1 - size)
        if not response.chunked or response.watch is not None:
            piece = response.read(wanted)
        else:
            buffer = bytearray(wanted)
            del buffer[response.readinto(buffer) :]
            piece = bytes(buffer)
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    if size > limit and not truncate:
        raise _invalid(response, refused)
    return b"".join(pieces)[:limit]


def _service_error(
    response: _PooledResponse, secrets: _Secrets, *, too_many_redirects: bool = False
) -> ServiceError:
    # A little more than is kept, as _read_json reads.
    try:
        raw = _read_body(response, _ERROR_BODY_LIMIT + secrets.longest, truncate=True)
    except DatasetClientError:
        raw = b""
    finally:
        response.close()
    try:
        body = raw.decode(response.headers.get_content_charset() or "utf-8", errors="replace")
    except (LookupError, UnicodeError, ValueError, TypeError):
        body = raw.decode("utf-8", errors="replace")
    return ServiceError(
        response.status,
        secrets.redact(response.reason) or http.client.responses.get(response.status, ""),
        response.method,
        response.url,
        headers=_redact_value(response.headers, secrets),
        body=secrets.redact(body)[:_ERROR_BODY_LIMIT],
        message=f"stopped after {_MAX_REDIRECTS} redirects" if too_many_redirects else None,
        proxy=response.proxy,
    )


def _message_of(payload: Any, body: str = "") -> str | None:
    """The service's message in a JSON error body, else _reason_in_text's."""
    if payload is None:
        return _reason_in_text(body)
    if not isinstance(payload, dict):
        return None
    for name in ("message", "error", "detail", "error_description", "title"):
        value = payload.get(name)
        if isinstance(value, dict):
            value = value.get("message")
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _reason_in_text(body: str) -> str | None:
    """XML Code and Message, an HTML title, or the first line."""
    import html

    text = body.lstrip("\ufeff \t\r\n")
    # Up to the next tag: a redacted secret's "<" is no tag.
    content = f"([^<]*(?:{_REDACTED}[^<]*)*)<"
    if not text.startswith("<"):
        parts = [text]
    else:
        found = [re.search(f"<{name}>{content}", text) for name in ("Code", "Message")]
        parts = [element[1] for element in found if element]
        title = None if parts else re.search(f"(?i)<title(?:\\s[^<>]*)?>{content}", text)
        parts = list(map(html.unescape, parts if title is None else [title[1]]))
    lines = [re.sub("[ \t]+", " ", part.strip().partition("\n")[0]).strip() for part in parts]
    reason = ": ".join(filter(None, lines))
    # Escaped as far as kept: escapes only lengthen it.
    return _escaped(reason[:200])[:200] or None


def _invalid(response: _PooledResponse, text: str) -> InvalidResponseError:
    where = _request_name(response.method, response.url, response.proxy)
    return InvalidResponseError(f"{where}: {text}", method=response.method, url=response.url)


# ============================================================================
# Secrets and redaction
# ============================================================================

_REDACTED = "<redacted>"
# Credentials in signed URLs (S3, GCS, CloudFront, Azure SAS, OAuth), shared starts once.
_SIGNED_PARAMETERS = (
    "X-(?:Amz-(?:Signature|Credential|Security-Token)|Goog-(?:Signature|Credential))"
    "|sig(?:nature)?|Policy|Key-Pair-Id|token|access_token"
)
# How each "=" _signed_parameter knows starts (its pattern runs only then).
_EQUALS_MARKS = ("=", "%3", "%25", "\\u00", "\\x3", "&#", "&equals;")
# An escape (percent, JSON, HTML): how a secret's other forms start.
_ESCAPE = r"%[0-9A-Fa-f]{2}|\\[uU/\"\\]|&#|&[A-Za-z][A-Za-z0-9]*;"
# Escaped wherever server text is shown (the command line too): C0, DEL, C1, bidirectional
# controls ("denied\u202e :ko" reads "ok"), invisible ones, line separators, lone surrogates.
_UNSEEN = (
    "\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u206f\ufeff"
    "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180e\u3164\uffa0\ufff9-\ufffb\U000e0000-\U000e007f"
    "\ud800-\udfff"
)


class _Secret(str):
    """A value that may be a credential: its repr never shows it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(_REDACTED)


class _Secrets:
    """Secrets to redact in any form a server echoes (``signed``: signed URLs' too)."""

    __slots__ = ("_redact_forms", "_shown", "signed", "texts")

    def __init__(self, texts: Iterable[str] = (), signed: bool = False):
        self.texts = tuple(map(_Secret, sorted(set(texts), key=len, reverse=True)))
        self.signed = signed
        self._redact_forms: Callable[[str], str] | None = None
        self._shown: _Secrets | None = None

    def __bool__(self) -> bool:
        return bool(self.texts) or self.signed

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Secrets, (self.texts, self.signed))

    def shown(self) -> _Secrets:
        """Signed URLs' credentials too: for errors and logs, not results."""
        if self._shown is None:
            self._shown = self if self.signed else _Secrets(self.texts, signed=True)
        return self._shown

    @property
    def longest(self) -> int:
        """The most characters an escaped secret can take."""
        return 8 * len(self.texts[0]) if self.texts else 0

    def redact(self, text: str) -> str:
        if self.signed and any(mark in text for mark in _EQUALS_MARKS):
            text = _signed_parameter().sub(rf"\1{_REDACTED}", text)
        if not self.texts:
            return text
        # No escape in the text: a secret is there as itself, if at all.
        if re.search(_ESCAPE, text) is None:
            for secret in self.texts:
                text = text.replace(secret, _REDACTED)
            return text
        if self._redact_forms is None:
            self._redact_forms = _forms_redactor(self.texts)
        return self._redact_forms(text)


def _secret_texts(values: Iterable[str], proxies: Mapping[str, str]) -> _Secrets:
    """``values`` (4 characters or more), proxy passwords, Basic credentials, and base64 (a bad
    proxy URL: ValueError)."""
    # urllib.request has imported it already.
    import base64

    texts = [_Secret(value) for value in values if len(value) >= 4]
    for scheme, proxy in proxies.items():
        # NO_PROXY, which urllib lists with them: hosts, not a URL.
        if scheme == "no":
            continue
        reason = "no // after its scheme"
        try:
            # Split as urllib sends it: urlsplit ends a password at "/" (its port, in its error).
            _, user, raw, hostport = map(
                _as_secret,
                urllib.request._parse_proxy(proxy),  # type: ignore[attr-defined]
            )
            reason = ""
            # The port too: else InvalidURL at each request. Its error shows no more.
            urllib.parse.urlsplit(f"//{hostport}").port  # noqa: B018
        except ValueError as exc:
            reason = reason or str(exc)
        # Raised outside the except clause: the exception caught holds the URL.
        if reason:
            variable = f"{scheme.upper()}_PROXY"
            said = f"{variable} is not a valid proxy URL ({reason}); its value is not shown"
            raise ValueError(said)
        if raw:
            password = _Secret(urllib.parse.unquote(raw))
            user = _Secret(urllib.parse.unquote(user or ""))
            basic = _Secret(base64.b64encode(f"{user}:{password}".encode()).decode())
            texts += [raw, password, basic]
    # Each one's base64 with its padding and without: servers echo both.
    for text in tuple(texts):
        encoded = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()
        texts += [_Secret(encoded), _Secret(encoded.rstrip("="))]
    return _Secrets(text for text in texts if len(text) >= 4)


def _forms_redactor(texts: tuple[str, ...]) -> Callable[[str], str]:
    """Replaces each secret in any mix of the forms servers echo."""
    # Only an error or a log path gets here.
    from html.entities import html5

    entities: dict[str, list[str]] = {}
    for name, character in html5.items():
        if name.endswith(";") and len(character) == 1:
            entities.setdefault(character, []).append(name)
    # A pattern a secret (alternatives stop the engine skipping ahead), base64's "==" too.
    stems = dict.fromkeys(text.rstrip("=") or text for text in texts)
    padding = f"(?:{_character_forms('=', entities)})?" * 2
    patterns = [
        re.compile("".join(_character_forms(c, entities) for c in stem) + padding) for stem in stems
    ]

    # A closure: no repr shows the patterns (they spell the secrets out).
    def redact(text: str) -> str:
        # The longest first: a secret in a longer one goes with it.
        for pattern in patterns:
            text = pattern.sub(_REDACTED, text)
        return text

    return redact


def _character_forms(character: str, entities: Mapping[str, list[str]]) -> str:
    code = ord(character)
    percent = "".join(f"%(?i:{byte:02x})" for byte in character.encode("utf-8", "surrogatepass"))
    # JSON's \uXXXX: four hex digits a UTF-16 unit.
    units = character.encode("utf-16-be", "surrogatepass").hex()
    escaped = "".join(f"\\\\(?i:u{units[i : i + 4]})" for i in range(0, len(units), 4))
    forms = [re.escape(character), percent, escaped, f"&#(?i:x0*{code:x});", f"&#0*{code};"]
    forms += [re.escape(f"&{name}") for name in entities.get(character, ())]
    # JSON's short escapes too (PHP's json_encode writes "\\/").
    if character in '/"\\':
        forms.append(re.escape(f"\\{character}"))
    return f"(?:{'|'.join(forms)})"


def _showable_url(url: str, secrets: _Secrets) -> str:
    return secrets.shown().redact(url)


@functools.cache
def _signed_parameter() -> re.Pattern[str]:
    """A signed URL's credential and its value, in any case or percent-encoding."""

    # A letter as itself (any case) or percent-encoded: s, %73, %53.
    def spelled(letter: re.Match[str]) -> str:
        c = letter[0]
        return f"(?:{c}|%{ord(c.lower()):x}|%{ord(c.upper()):x})"

    names = re.sub(r"[-\w]", spelled, _SIGNED_PARAMETERS)
    # "%" nested (%25, %2525) or JSON's \u0025. Before the name "?", "&" or "#" (a fragment's), as
    # such, in JSON, JavaScript (\x26) or nested; then "=" so, or in HTML.
    percent = r"(?:%|\\u0025)(?:25)*"
    after = rf"(?:[?&;#]|\\[ux]0*(?:26|3f)|{percent}(?:26|3f))"
    equals = rf"(?:=|{percent}3d|\\[ux]0*3d|&#0*61;|&#x0*3d;|&equals;)"
    # The value, to a URL's end in a text (JSON's "\/" in it).
    value = r"[^\s&#\"'<>\\]*(?:\\/[^\s&#\"'<>\\]*)*[^\s&#\"'<>\\:,.;)\]]"
    # A name's first letter (or %XX) first: near misses fail at once.
    return re.compile(f"(?i)({after}(?=[a-z]|%[4-7])(?:{names}){equals}){value}")


def _redact_value(value: Any, secrets: _Secrets, strict: bool = False) -> Any:
    """A redacted copy of text, bytes, headers, containers (others: as they are, or TypeError)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return secrets.redact(value)
    if isinstance(value, (bytes, bytearray)):
        # Every byte kept as it was, whatever its encoding.
        text = bytes(value).decode("utf-8", "surrogateescape")
        clean = secrets.redact(text)
        return value if clean == text else clean.encode("utf-8", "surrogateescape")
    if isinstance(value, http.client.HTTPMessage):
        headers = http.client.HTTPMessage()
        for name, text in value.items():
            headers[secrets.redact(name)] = secrets.redact(text)
        return headers
    if isinstance(value, (list, collections.abc.Mapping)):
        return _redact_nested(value, secrets, strict)
    if isinstance(value, (tuple, set, frozenset)):
        items = _redact_nested(list(value), secrets, strict)
        if isinstance(value, tuple):
            return tuple(items)
        return frozenset(items) if isinstance(value, frozenset) else set(items)
    if strict and not isinstance(value, (int, float, type(None))):
        raise TypeError(f"cannot redact a {type(value).__name__}: text or containers of it only")
    return value


def _redact_nested(
    value: list[Any] | Mapping[Any, Any], secrets: _Secrets, strict: bool
) -> dict[Any, Any] | list[Any]:
    """A copy (a mapping's: a dict), not recursive: JSON may nest thousands deep."""

    def shallow(container: list[Any] | Mapping[Any, Any]) -> dict[Any, Any] | list[Any]:
        if isinstance(container, collections.abc.Mapping):
            return {_redact_value(key, secrets, strict): item for key, item in container.items()}
        return list(container)

    top = shallow(value)
    # A container met twice (or inside itself) is copied once.
    copies = {id(value): top}
    pending = [top]
    while pending:
        container = pending.pop()
        places = container.keys() if isinstance(container, dict) else range(len(container))
        for place in list(places):
            item = container[place]
            if isinstance(item, (list, collections.abc.Mapping)):
                if id(item) not in copies:
                    copies[id(item)] = shallow(item)
                    pending.append(copies[id(item)])
                container[place] = copies[id(item)]
            else:
                container[place] = _redact_value(item, secrets, strict)
    return top


def _redact_error(error: BaseException, secrets: _Secrets) -> None:
    """Redact ``error`` and its causes; drop the causes' frames."""
    limit = _ERROR_BODY_LIMIT
    for exc in _exception_chain(error):
        exc.args = tuple(_redact_value(arg, secrets) for arg in exc.args)
        for name, value in list(vars(exc).items()):
            if name.startswith("__"):
                continue
            body = isinstance(value, (str, bytes, bytearray)) and len(value) > limit
            # A cause's copy of a body (IncompleteRead.partial): its start only.
            if body and exc is not error:
                value = _redact_value(value[: limit + secrets.longest], secrets)[:limit]
            setattr(exc, name, _redact_value(value, secrets))
        if exc is not error:
            exc.__traceback__ = None


def _exception_chain(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    pending = [error]
    while pending:
        exc = pending.pop()
        if any(exc is seen for seen in chain):
            continue
        chain.append(exc)
        pending += [linked for linked in (exc.__context__, exc.__cause__) if linked is not None]
    return chain


def _clear_library_frames(error: BaseException) -> None:
    """Clear finished library frames' locals in ``error``'s chain (not a caller's)."""
    stdlib = os.path.dirname(os.__file__)
    for exc in _exception_chain(error):
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            tb = tb.tb_next
            name = frame.f_code.co_filename
            in_stdlib = name.startswith(stdlib) and "-packages" not in name
            if frame.f_globals is globals() or in_stdlib:
                # A frame still running (the one catching it) cannot be cleared.
                with contextlib.suppress(RuntimeError):
                    frame.clear()


def _escaped(text: str) -> str:
    """``text``, _UNSEEN's characters escaped (``\\u202e``)."""
    return re.sub(f"[{_UNSEEN}]", _escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found[0])
    if code < 0xA0:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


# ============================================================================
# Messages and the log
# ============================================================================


def _request_name(method: str, url: str, proxy: str | None) -> str:
    via = f" via proxy {proxy} (NO_PROXY bypasses it)" if proxy else ""
    return f"{method} {url}{via}"


def _shortened(text: str, limit: int = 60, *, kept: int | None = None) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit if kept is None else kept]}... ({len(text)} characters)"


def _size(count: float) -> str:
    """A byte count for people: 512 B, 1.5 KiB, 3.0 GiB."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    index = 0
    while count >= 1024 and index < len(units) - 1:
        count /= 1024
        index += 1
    return f"{count:.0f} B" if index == 0 else f"{count:.1f} {units[index]}"


@functools.cache
def _logger() -> Any:
    # Only retries, resumes and (at DEBUG) requests log: logging is off the import path.
    import logging

    logger = logging.getLogger("dataset_client")
    logger.addHandler(logging.NullHandler())
    return logger


# logging's levels, named without importing logging.
_DEBUG = 10
_INFO = 20
_WARNING = 30


# ============================================================================
# The deadline and the stall watch
# ============================================================================

_NEVER = float("inf")


class _Deadline:
    """When a call must end, on each _Request (inf: no lookup thread, no response watched)."""

    def __init__(self, seconds: float = _NEVER):
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.finite = seconds < _NEVER

    def left(self) -> float:
        return self.ends - time.monotonic()

    def wait(self, timeout: float | None, method: str, url: str) -> float | None:
        """``timeout``, or the time left if less (none: raised)."""
        if not self.finite:
            return timeout
        left = self.left()
        if left <= 0:
            raise self.reached(method, url)
        return left if timeout is None else min(left, timeout)

    def reached(
        self, method: str, url: str, what: str = "was reached", asked: float | None = None
    ) -> RequestTimeoutError:
        deadline = ("deadline", f"the deadline of {self.seconds:g} s")
        fields = dict(method=method, url=url, deadline=self.seconds, retry_after=asked)
        return _named(RequestTimeoutError, f"{method} {url}: ", deadline, f" {what}", **fields)

    def stop(
        self, error: DatasetClientError, method: str, url: str, delay: float | None
    ) -> RequestTimeoutError | None:
        """The error ending the call (its deadline reached, or ``delay`` past it)."""
        if isinstance(error, RequestTimeoutError) and error.deadline:
            return error
        left = self.left()
        if left > 0 and (delay is None or delay < left):
            return None
        if left <= 0:
            ended = self.reached(method, url)
        else:
            asked = error.retry_after if isinstance(error, ServiceError) else None
            wait = "the next retry"
            if asked is not None:
                wait = f"the retry in {delay:g} s that Retry-After asks for"
            ended = self.reached(method, url, f"comes before {wait}: not waited for", asked)
        ended.__cause__ = error
        return ended


_NO_DEADLINE = _Deadline()


class _Request(urllib.request.Request):
    deadline: _Deadline


class _ReceivingWithin(io.RawIOBase):
    def __init__(self, raw: Any, deadline: _Deadline):
        super().__init__()
        self.raw = raw
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self.deadline.left()
        if left <= 0:
            raise TimeoutError("the deadline was reached")
        sock = self.raw._sock
        waits = sock.gettimeout()
        if waits is None or waits > left:
            sock.settimeout(left)
        return self.raw.readinto(buffer)  # type: ignore[no-any-return]

    def close(self) -> None:
        if not self.closed:
            self.raw.close()
        super().close()


def _connect_within(
    deadline: _Deadline,
    hold: _Hold,
    address: tuple[str, int],
    timeout: float | None,
    source: tuple[str, int] | None = None,
) -> socket.socket:
    """socket.create_connection ended by ``deadline``; ``hold`` gets each socket."""
    host, port = address
    failure = OSError(f"no address for {host}")
    if deadline.finite:
        found = _resolve_within(host, port, deadline)
    else:
        found = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    for family, kind, protocol, _, sockaddr in found:
        # Past the deadline, a TimeoutError (mapped: timed out connecting).
        wait = deadline.wait(timeout, "connecting to", host)
        sock = socket.socket(family, kind, protocol)
        try:
            hold(sock)
            sock.settimeout(wait)
            if source:
                sock.bind(source)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:
            sock.close()
            raise
        sock.settimeout(timeout)
        return sock
    raise failure


def _resolve_within(host: str, port: int, deadline: _Deadline) -> list[Any]:
    """``getaddrinfo`` given up at ``deadline`` (in a thread: a lookup cannot be stopped)."""
    with contextlib.suppress(socket.gaierror):
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    import threading

    found: list[Any] = []

    def look_up() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except Exception as exc:
            found.append(exc)

    thread = threading.Thread(target=look_up, name=f"dataset_client: looking up {host}")
    thread.daemon = True
    thread.start()
    thread.join(max(deadline.left(), 0))
    if not found:
        raise TimeoutError(f"timed out looking up {host}")
    if isinstance(found[0], Exception):
        raise found[0]
    return found[0]  # type: ignore[no-any-return]


class _Watch:
    """A body read a receive at a time, within its deadline and above ``min_rate``."""

    def __init__(self, timeout: float | None, min_rate: float | None = None):
        self.min_rate = min_rate
        self.period = timeout or 30.0
        # With min_rate, no wait is longer: a stretch bringing nothing is measured too.
        self.timeout = self.period if min_rate else timeout
        self.started, self.received = time.monotonic(), 0
        self.ended: DatasetClientError | None = None

    def read(self, response: _PooledResponse, amount: int | None = None) -> bytes:
        """``response.read(amount)``: bytes before a stall returned; the next read raises."""
        if self.ended is not None:
            # The body is whole: a stall with its last bytes ends nothing.
            if response.length == 0:
                return b""
            raise self.ended
        data = bytearray()
        try:
            while amount is None or len(data) < amount:
                self._before_receiving(response)
                size = amount - len(data) if amount else _CHUNK_SIZE
                try:
                    piece = http.client.HTTPResponse.read1(response, size)
                except TimeoutError:
                    raise self._timed_out(response) from None
                if not piece:
                    break
                data += piece
                self._count(response, len(piece))
        except DatasetClientError as error:
            if not data or amount is None:
                raise
            self.ended = error
            return bytes(data)
        # read1 leaves it open at the body's end: closed so, its connection is reused.
        if response.length == 0 and response.fp is not None:
            http.client.HTTPResponse.read(response, 0)
        if amount is None and response.length:
            raise http.client.IncompleteRead(bytes(data), response.length)
        return bytes(data)

    def _before_receiving(self, response: _PooledResponse) -> None:
        wait = response.deadline.wait(self.timeout, response.method, response.url)
        if response.sock is not None and response.sock.gettimeout() != wait:
            response.sock.settimeout(wait)

    def _count(self, response: _PooledResponse, count: int) -> None:
        self.received += count
        now = time.monotonic()
        if self.min_rate is not None and now - self.started >= self.period:
            if self.received < self.min_rate * (now - self.started):
                raise self._stalled(response, now)
            self.started = now
            self.received = 0

    def _timed_out(self, response: _PooledResponse) -> DatasetClientError:
        if response.deadline.left() < 0.01:
            return response.deadline.reached(response.method, response.url)
        if self.min_rate is not None:
            return self._stalled(response, time.monotonic())
        return response.mapped_error(TimeoutError())

    def _stalled(self, response: _PooledResponse, now: float) -> RequestTimeoutError:
        elapsed = now - self.started
        rate = self.received / max(elapsed, 1e-9)
        where = _request_name(response.method, response.url, response.proxy)
        stalled = f"{where}: stalled at {_size(rate)}/s over {elapsed:.1f} s"
        below = f"{stalled}, below the {_size(self.min_rate or 0)}/s of "
        fields = dict(method=response.method, url=response.url, _stalled=True)
        return _named(RequestTimeoutError, below, ("min_rate", "min_rate"), **fields)


# ============================================================================
# Connections and the pool
# ============================================================================

_MAX_IDLE_PER_ORIGIN = 8
_MAX_INTERIM_RESPONSES = 100


class _ConnectionPool(urllib.request.BaseHandler):
    """A thread-safe urllib handler keeping HTTP/1.1 connections alive."""

    def __init__(self, ssl_context: ssl.SSLContext | None):
        self._ssl_context = ssl_context
        self.ca_bundle: str | None = None
        self.closed = False
        self._settled: set[tuple[str, str, int]] = set()
        self._start_afresh()
        _pools.add(self)

    def _start_afresh(self) -> None:
        self._lock = _thread.allocate_lock()
        self._idle: dict[_PoolKey, list[http.client.HTTPConnection]] = {}
        self._busy: dict[http.client.HTTPConnection, int] = {}
        self._connecting: dict[int, socket.socket] = {}
        # Held until close(): a retry's wait (sleep) ends then.
        self._open = _thread.allocate_lock()
        self._open.acquire()

    def _leave_parents_connections(self) -> None:
        """The parent's sockets closed, not through io's locks."""
        connections = itertools.chain(self._busy, *self._idle.values())
        socks = [connection.sock for connection in connections]
        socks += self._connecting.values()
        # A new lock too: the parent's may have been held at the fork.
        self._start_afresh()
        for sock in socks:
            if sock is not None:
                with contextlib.suppress(OSError):
                    os.close(sock.detach())

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self._open.release()
            self.closed = True
            idle = self._idle
            self._idle = {}
            threads = {*self._busy.values(), *self._connecting}
        for connection in itertools.chain.from_iterable(idle.values()):
            connection.close()
        self.interrupt(threads)

    def first_probe(self, url: str) -> bool:
        """Whether to probe ``url``'s origin: once, before any answer."""
        origin = _origin_of(url)
        with self._lock:
            if self.closed or origin in self._settled:
                return False
            self._settled.add(origin)
            return True

    def interrupt(self, threads: Collection[int]) -> None:
        with self._lock:
            socks = [busy.sock for busy, thread in self._busy.items() if thread in threads]
            # Under the lock: connected() closes them under the lock too.
            for thread, held in self._connecting.items():
                if thread in threads:
                    _shut_down(held)
        for sock in socks:
            _shut_down(sock)

    def sleep(self, seconds: float) -> None:
        """time.sleep(seconds), ended by close()."""
        if self._open.acquire(timeout=seconds):
            self._open.release()

    def hold(self, sock: socket.socket) -> None:
        """Keep a dup of this thread's connecting socket for close() to shut down."""
        self.connected()
        with self._lock:
            self._check_open()
            self._connecting[_thread.get_ident()] = sock.dup()

    def connected(self) -> None:
        with self._lock:
            held = self._connecting.pop(_thread.get_ident(), None)
            if held is not None:
                held.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ClientClosedError(_CLOSED)

    def handle_request(self, request: _Request) -> _PooledResponse:
        method = request.get_method()
        url = request.full_url
        tunnel: str | None = request._tunnel_host  # type: ignore[attr-defined]
        proxy = request.host if tunnel or request.has_proxy() else None
        key = (request.type, request.host, tunnel)
        headers = request.headers
        authorization = _proxy_authorization(headers, tunnel)
        # A GET or keyed POST is sent again when a kept-alive connection was dead (as Go does).
        replayable = method == "GET" or "Idempotency-Key" in headers
        timeout = request.timeout
        responses: Callable[..., _PooledResponse] = _PooledResponse
        if request.deadline.finite:
            # A trickle ends too: the head read a receive at a time, the body watched.
            timeout = request.deadline.wait(timeout, method, url)
            responses = functools.partial(_PooledResponse.within, request.deadline, request.timeout)
        connection = self._checkout(key)
        while True:
            reused = connection is not None
            if connection is None:
                connection = self._connect(request, key, proxy, authorization, timeout, responses)
            elif connection.sock.gettimeout() != timeout:
                connection.sock.settimeout(timeout)
            connection.response_class = responses  # type: ignore[assignment]
            try:
                connection.request(method, request.selector, request.data, headers)
                sock = connection.sock
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                self._release(key, connection, False)
                hung_up = isinstance(exc, (ConnectionError, http.client.BadStatusLine))
                if reused and replayable and hung_up:
                    # The other idle ones are as old: likely dead too.
                    with self._lock:
                        stale = self._idle.pop(key, [])
                    for dead in stale:
                        dead.close()
                    connection = None
                    continue
                # Without its traceback: http.client's frames hold the header bytes.
                error = _transport_error(exc, method, url, proxy=proxy, fresh=not reused)
                raise error from exc.with_traceback(None)
            except BaseException as exc:
                self._release(key, connection, False)
                raise exc.with_traceback(None) from None
            assert isinstance(response, _PooledResponse)
            if not reused:
                self._settled.add(_origin_of(url))
            response.method, response.url, response.proxy = method, url, proxy
            # getresponse() drops a close-delimited response's socket: kept, for close().
            connection.sock = response.sock = sock
            response._release = functools.partial(self._release, key, connection)
            _check_framing(response)
            return response

    http_open = https_open = handle_request

    def _checkout(self, key: _PoolKey) -> http.client.HTTPConnection | None:
        """An idle connection with nothing to read (else the server closed it)."""
        with self._lock:
            self._check_open()
            idle = self._idle.get(key)
            while idle:
                connection = idle.pop()
                readable: object
                try:
                    if hasattr(select, "poll"):
                        poller = select.poll()
                        poller.register(connection.sock, select.POLLIN)
                        readable = poller.poll(0)
                    else:
                        readable = select.select([connection.sock], [], [], 0)[0]
                except (OSError, ValueError, TypeError):
                    readable = True
                if not readable:
                    self._busy[connection] = _thread.get_ident()
                    return connection
                connection.close()
        return None

    def _connect(
        self,
        request: _Request,
        key: _PoolKey,
        proxy: str | None,
        authorization: str | None,
        timeout: float | None,
        responses: Callable[..., _PooledResponse],
    ) -> http.client.HTTPConnection:
        """TCP, the proxy's CONNECT tunnel, TLS; failures mapped."""
        connection: http.client.HTTPConnection
        if self._ssl_context is None and (request.type == "https" or self.ca_bundle):
            self._ssl_context = _default_ssl_context(self.ca_bundle)
        tls = self._ssl_context
        if request.type == "https":
            connection = http.client.HTTPSConnection(request.host, timeout=timeout, context=tls)
        else:
            connection = http.client.HTTPConnection(request.host, timeout=timeout)
        # The CONNECT's answer is read as the response will be: within the deadline.
        connection.response_class = responses  # type: ignore[assignment]
        if key[2]:
            tunnel_headers = {"Proxy-Authorization": authorization} if authorization else None
            connection.set_tunnel(key[2], headers=tunnel_headers)
        connect = functools.partial(_connect_within, request.deadline, self.hold)
        connection._create_connection = connect  # type: ignore[attr-defined]
        try:
            connection.connect()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            # Its frames hold the CONNECT's Proxy-Authorization.
            exc.with_traceback(None)
            method = request.get_method()
            url = request.full_url
            # A CONNECT refused for credentials (http.client's words, 3.11-3.15; tinyproxy: 401).
            refusal = str(exc).partition("Tunnel connection failed: ")[2]
            if key[2] and refusal[:4] in ("407 ", "401 "):
                error = _proxy_credentials_error(
                    method, url, proxy or "", "HTTPS_PROXY", bool(authorization), refusal
                )
                raise error from _ProxyAuthenticationRequired(refusal)
            failure = _transport_error(exc, method, url, connecting=True, proxy=proxy, context=tls)
            raise failure from exc
        except BaseException as exc:
            connection.close()
            raise exc.with_traceback(None) from None
        finally:
            self.connected()
        with self._lock:
            if self.closed:
                connection.close()
            self._check_open()
            self._busy[connection] = _thread.get_ident()
        return connection

    def _release(
        self, key: _PoolKey, connection: http.client.HTTPConnection, reusable: bool
    ) -> None:
        with self._lock:
            self._busy.pop(connection, None)
            idle = self._idle.setdefault(key, [])
            kept = reusable and connection.sock is not None and not self.closed
            if kept and len(idle) < _MAX_IDLE_PER_ORIGIN:
                # Kept till the next request: a redirect's holds a signed Location.
                connection._HTTPConnection__response = None  # type: ignore[attr-defined]
                idle.append(connection)
                return
        connection.close()


def _after_fork_in_child() -> None:
    for pool in _pools:
        pool._leave_parents_connections()


_pools: weakref.WeakSet[_ConnectionPool] = weakref.WeakSet()
# A hook, not a check each request; embedders that fork from C run it too.
if _HAS_FORK_HOOKS:
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _shut_down(sock: socket.socket | None) -> None:
    """A read or write blocked on it in another thread ends now."""
    if sock is not None:
        # socket.socket's shutdown: SSLSocket's would drop its TLS state under a reader.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _PooledResponse(http.client.HTTPResponse):
    """Maps its read errors; gives its connection back when closed."""

    method = ""
    encoding = "identity"
    proxy: str | None = None
    sock: socket.socket | None = None
    _release: Callable[[bool], None] | None = None
    deadline = _NO_DEADLINE
    watch: _Watch | None = None

    @classmethod
    def within(
        cls, deadline: _Deadline, timeout: float | None, sock: socket.socket, **options: Any
    ) -> _PooledResponse:
        response = cls(sock, **options)
        response.fp = io.BufferedReader(_ReceivingWithin(response.fp.detach(), deadline))
        response.deadline = deadline
        response.watch = _Watch(timeout)
        return response

    def _read_status(self) -> tuple[str, int, str]:
        # http.client skips only 100 Continue: skip each 1xx (103 Early Hints...), a few.
        version, status, reason = super()._read_status()  # type: ignore[misc]
        interim = 0
        while 100 <= status < 200:
            interim += 1
            if status == 101:
                raise http.client.BadStatusLine(f"unexpected {status} {reason.strip()}")
            if interim > _MAX_INTERIM_RESPONSES:
                raise _TooManyInterimResponses
            http.client.parse_headers(self.fp)
            version, status, reason = super()._read_status()  # type: ignore[misc]
        ahead = self.fp.peek()
        if b"\r\n\r\n" not in ahead:
            # No headers, or lines ending in LF alone: http.client reads those whole.
            whole = ahead.startswith((b"\r\n", b"\n")) or b"\n\r\n" in ahead or b"\n\n" in ahead
            if not whole:
                # The head's rest via a _HeadReader: http.client takes a cut for its end.
                self.fp = _HeadReader(self.fp)  # type: ignore[assignment]
        return version, status, reason

    def read(self, amount: int | None = None) -> bytes:
        if self.watch is not None:
            return self.mapped(self.watch.read, self, amount)
        # As mapped() does, a call less: every body is read here.
        try:
            return super().read(amount)
        except (OSError, http.client.HTTPException) as exc:
            raise self.mapped_error(exc) from exc

    def readinto(self, buffer: Any) -> int:
        return self.mapped(super().readinto, buffer)

    def mapped(self, read: Callable[..., _T], *arguments: Any) -> _T:
        try:
            return read(*arguments)
        except DatasetClientError:
            # Mapped already: a watch's RequestTimeoutError is an OSError too.
            raise
        except (OSError, http.client.HTTPException) as exc:
            raise self.mapped_error(exc) from exc

    def mapped_error(self, exc: BaseException) -> DatasetClientError:
        return _transport_error(exc, self.method, self.url, proxy=self.proxy)

    def close(self) -> None:
        # http.client drops ``fp`` at the body's end; a body left unread: the connection goes.
        complete = self.fp is None
        super().close()
        release = self._release
        self._release = None
        if release is not None:
            release(complete and not self.will_close)


class _HeadReader:
    """A stream while the head is read: notes a line the stream's end cut short."""

    def __init__(self, raw: Any):
        self.raw = raw
        self.cut = False

    def readline(self, limit: int = -1) -> bytes:
        line: bytes = self.raw.readline(limit)
        self.cut = self.cut or not line.endswith(b"\n")
        return line

    def close(self) -> None:
        self.raw.close()

    def flush(self) -> None: ...


class _HeadCutOff(http.client.HTTPException):
    """Closed before the head ended."""


class _TooManyInterimResponses(http.client.HTTPException):
    """More 1xx responses than any server sends."""


def _transport_error(
    exc: BaseException,
    method: str,
    url: str,
    *,
    connecting: bool = False,
    proxy: str | None = None,
    context: ssl.SSLContext | None = None,
    fresh: bool = False,
) -> DatasetClientError:
    """The client's error for a socket, TLS or HTTP failure (``fresh``: a new connection)."""
    where = _request_name(method, url, proxy)
    if isinstance(exc, TimeoutError):
        message = f"{where}: timed out {'connecting' if connecting else 'waiting for data'}"
        return RequestTimeoutError(message, method=method, url=url, connecting=connecting)
    if isinstance(exc, _TooManyInterimResponses):
        message = f"{where}: more than {_MAX_INTERIM_RESPONSES} interim (1xx) responses"
        return InvalidResponseError(message, method=method, url=url)
    if isinstance(exc, _HeadCutOff):
        message = f"{where}: connection closed in the middle of the response's headers"
        return IncompleteResponseError(message, method=method, url=url)
    if isinstance(exc, http.client.IncompleteRead):
        received = len(exc.partial)
        expected = None if exc.expected is None else received + exc.expected
        of = ("expected", f"{'?' if expected is None else expected} bytes")
        fields = dict(method=method, url=url, expected=expected, received=received)
        cut = f"{where}: connection closed after "
        got = ("received", f"{received}")
        return _named(IncompleteResponseError, cut, got, " of ", of, **fields)
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = f"TLS certificate verification failed: {exc.verify_message}"
        text = f"{where}: {detail}{_trust_advice(exc, context)}"
        return NetworkError(text, method=method, url=url, connecting=connecting, certificate=True)
    failed = "could not connect" if connecting else "connection lost"
    detail = f"{failed}: {str(exc) or type(exc).__name__}"
    error = NetworkError(f"{where}: {detail}", method=method, url=url, connecting=connecting)
    scheme = urllib.parse.urlsplit(url).scheme
    # As a server speaking the other scheme fails: https:// and no TLS spoken back (an alert is
    # TLS, a certificate's failure returned above), or http:// hung up on a new connection.
    no_tls = connecting and isinstance(exc, ssl.SSLError) and "ALERT" not in (exc.reason or "")
    hung_up = fresh and isinstance(exc, (ConnectionError, http.client.BadStatusLine))
    if proxy is None and ((scheme == "https" and no_tls) or (scheme == "http" and hung_up)):
        error._scheme_in_doubt = True
    return error


# ============================================================================
# Proxies and TLS trust
# ============================================================================


class _ProxyHandler(urllib.request.ProxyHandler):
    """NO_PROXY read by _NoProxy, once a host."""

    def __init__(self) -> None:
        proxies = urllib.request.getproxies()
        # _Secret: a proxy's URL may hold its password.
        super().__init__({scheme: _Secret(url) for scheme, url in proxies.items()})
        self._no_proxy = urllib.request.getproxies_environment().get("no")
        self._rules: _NoProxy | None = None
        self._bypass: dict[tuple[str, str], bool] = {}

    def proxy_open(
        self, req: urllib.request.Request, proxy: str, type: str
    ) -> http.client.HTTPResponse | None:
        key = (req.type, req.host)
        if key not in self._bypass:
            if not req.host:
                bypass = False
            elif self._no_proxy is None:
                # No variable: the system's settings (macOS, Windows), as urllib reads them.
                bypass = bool(urllib.request.proxy_bypass(req.host))
            else:
                if self._rules is None:
                    self._rules = _NoProxy(self._no_proxy)
                bypass = self._rules.matches(req.type, req.host)
            self._bypass[key] = bypass
        if self._bypass[key]:
            return None
        response = super().proxy_open(req, proxy, type)
        credentials = req.headers.get("Proxy-authorization")
        if credentials:
            req.headers["Proxy-authorization"] = _Secret(credentials)
        return response


class _NoProxy:
    """NO_PROXY as requests and curl read it (names, suffixes, addresses, CIDR, ports, ``*``)."""

    def __init__(self, text: str):
        import ipaddress

        self.everything = False
        self.names: list[tuple[str, int | None]] = []
        self.networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None]] = []
        for entry in text.lower().replace(",", " ").split():
            if entry == "*":
                self.everything = True
                continue
            # "[::1]:8080", "name:8080", or a name or address (colons: IPv6) alone.
            if entry.startswith("["):
                host, _, rest = entry[1:].partition("]")
                port = int(rest[1:]) if rest[1:].isdigit() else None
            else:
                host, colon, digits = entry.rpartition(":")
                port = int(digits) if colon and ":" not in host and digits.isdigit() else None
                host = entry if port is None else host
            try:
                self.networks.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                # ".example.com" matches example.com too.
                if host.strip("."):
                    self.names.append((host.strip("."), port))

    def matches(self, scheme: str, host: str) -> bool:
        """Whether ``host`` (``name[:port]``) is reached directly."""
        import ipaddress

        if self.everything:
            return True
        try:
            _, name, port = _origin_of(f"{scheme}://{host}")
        except ValueError:
            return False
        name = name.rstrip(".")
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            # A name: itself or a subdomain (not "badexample.com").
            return any(
                wanted in (None, port) and (name == suffix or name.endswith(f".{suffix}"))
                for suffix, wanted in self.names
            )
        return any(wanted in (None, port) and address in net for net, wanted in self.networks)


def _proxy_authorization(headers: MutableMapping[str, str], tunnel: str | None) -> str | None:
    """The Proxy-Authorization urllib added, sent unless a CONNECT's."""
    authorization = headers.pop("Proxy-authorization", None)
    if authorization and not tunnel:
        headers["Proxy-Authorization"] = authorization
    return authorization


def _proxy_credentials_error(
    method: str, url: str, proxy: str, variable: str, sent: bool, status: str
) -> NetworkError:
    """A proxy's 407, saying where credentials go; never retried."""
    wants = f"wants credentials; {variable} has none"
    wants = f"refused the credentials in {variable}" if sent else wants
    message = (
        f"{_request_name(method, url, proxy)}: {status}: the proxy {wants}: set"
        f" {variable}=http://USER:PASSWORD@{proxy} (USER and PASSWORD percent-encoded, @ as %40,"
        " : as %3A). Only Basic proxy authentication is spoken: for an NTLM or Kerberos proxy,"
        f" run a local relay such as cntlm or px and point {variable} at it"
    )
    return NetworkError(message, method=method, url=url, connecting=True)


class _ProxyAuthenticationRequired(OSError):
    """A proxy's status line, a 407's cause."""


def _checked_trust(
    ssl_context: ssl.SSLContext | None, ca_bundle: str | os.PathLike[str] | None
) -> tuple[ssl.SSLContext | None, str | None]:
    """The context (None: the default, made when needed), ``ca_bundle`` absolute."""
    if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
        raise TypeError(f"ssl_context must be an ssl.SSLContext, not {type(ssl_context).__name__}")
    if ca_bundle is None:
        return ssl_context, None
    if ssl_context is not None:
        raise ValueError(
            "ca_bundle and ssl_context cannot both be given: load the CAs into the context instead"
        )
    path = os.fspath(ca_bundle) if isinstance(ca_bundle, (str, os.PathLike)) else None
    if not isinstance(path, str):
        name = type(ca_bundle).__name__
        raise _refused("ca_bundle", f"must be a path (str or os.PathLike), not {name}", TypeError)
    if not path:
        said = "is empty: name a file or directory of PEM CA certificates"
        raise _refused("ca_bundle", said, FileNotFoundError)
    # Read at each handshake (a hashed directory): no chdir may change it.
    path = os.path.abspath(path)
    return _default_ssl_context(path), path


def _default_ssl_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """As requests verifies: the system store, REQUESTS_CA_BUNDLE's and ca_bundle."""
    context = ssl.create_default_context()
    # 3.13's default; many TLS-inspecting proxies' CAs fail it (urllib3 accepts them).
    context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    paths = ssl.get_default_verify_paths()
    places = []
    for variable, default in (("SSL_CERT_FILE", paths.cafile), ("SSL_CERT_DIR", paths.capath)):
        if os.environ.get(variable):
            places.append(f"{os.environ[variable]} from {variable}")
        elif default:
            places.append(default)
    trusted = [f"the system's CA store ({', '.join(places) or 'none found'})"]
    variable = "REQUESTS_CA_BUNDLE" if os.environ.get("REQUESTS_CA_BUNDLE") else "CURL_CA_BUNDLE"
    for origin, path in ((variable, os.environ.get(variable)), ("ca_bundle", ca_bundle)):
        if path:
            _load_ca_bundle(context, path, origin)
            trusted.append(f"{path} from {origin}")
    _trusted_by_default[context] = ", ".join(trusted)
    return context


# What each context _default_ssl_context made trusts, for a verification failure.
_trusted_by_default: weakref.WeakKeyDictionary[ssl.SSLContext, str] = weakref.WeakKeyDictionary()


def _load_ca_bundle(context: ssl.SSLContext, path: str, source: str) -> None:
    """Add a PEM file's or directory's CAs; warn if others can change it."""
    try:
        # Before any read: OpenSSL waits on a FIFO, reads /dev/zero.
        status = os.stat(path)
        mode = status.st_mode
        if stat.S_ISDIR(mode):
            context.load_verify_locations(capath=path)
        elif stat.S_ISREG(mode):
            context.load_verify_locations(cafile=path)
        else:
            raise OSError("a FIFO, device or socket is never read")
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        said = f" names {path}, which is not a file or directory of PEM CA certificates: {reason}"
        kind: Callable[[str], Exception] = type(exc)
        if source != "ca_bundle":
            kind = ValueError
        elif isinstance(exc, ssl.SSLError):
            kind = functools.partial(ssl.SSLError, exc.errno)
        raise _named(kind, (source, source), said) from None
    who = "who could have any server trusted"
    if mode & 0o022:
        # "lasting": the CLI shows it whole.
        warning = f"%s %s is writable by group or others, {who} (chmod go-w)"
        _logger().warning(warning, source, path, extra={"lasting": True})
    elif not _is_mine(status, or_root=True):
        warning = f"%s %s is owned by another user (uid %d), {who}"
        _logger().warning(warning, source, path, status.st_uid, extra={"lasting": True})


def _trust_advice(exc: ssl.SSLCertVerificationError, context: ssl.SSLContext | None) -> str:
    """What was trusted, how to trust another CA; "" when that would not help."""
    if exc.verify_code in _NOT_A_CA_PROBLEM:
        return ""
    trusted = _trusted_by_default.get(context) if context is not None else None
    if trusted is None:
        return (
            "; trusted: the ssl_context given, as given"
            " (add a CA with its load_verify_locations(FILE))"
        )
    return (
        f"; trusted: {trusted}; to trust another CA: REQUESTS_CA_BUNDLE=FILE (added to the"
        " system store) or SSL_CERT_FILE=FILE (in place of its file), ca_bundle=FILE or"
        " ssl_context= in code"
    )


# OpenSSL's X509_V_ERR_ codes for a certificate out of its dates, or for another name.
_NOT_A_CA_PROBLEM = frozenset((9, 10, 62, 64))


# ============================================================================
# The download engine
# ============================================================================

_HASH_QUEUE_BYTES = 16 * 1024 * 1024
_MIN_PART_SIZE = _CHUNK_SIZE
_MAX_RESTARTS = 3
_MAX_REORDER_BYTES = 64 * 1024 * 1024
_MAX_DIGEST_MEMBERS = 16
# RFC 9530 and RFC 3230 names, lowercased, and hashlib's: the strongest first.
_DIGEST_ALGORITHMS = {"sha-512": "sha512", "sha-256": "sha256"}


class _FileChanged(Exception):
    """Another version of the file answered: start over."""

    reason = "the file changed on the server"


class _ResumeRefused(_FileChanged):
    """A 416 to a resumed range: the kept bytes are another version's."""

    reason = "the server refused the kept range (416)"


class _PartStopped(Exception):
    """Another part failed, or the first response carries this one."""


class _Stated:
    """A digest the file must have: ``sha256``, or one a header states."""

    def __init__(self, header: str, algorithm: str, value: str):
        self.header, self.algorithm, self.value = header, algorithm, value
        self.hash = _DIGEST_ALGORITHMS[algorithm]
        self.name = header if header == "sha256" else f"{header} ({algorithm})"


class _Part:
    """Bytes ``[start, end)`` (``end`` None: unknown yet), ``done`` of them in."""

    def __init__(self, start: int, end: int | None, done: int = 0):
        self.start, self.end, self.done = start, end, done
        self.taken = self.dropped = False
        self.check: _PartCheck | None = None
        self.deferred: tuple[int, _Stated] | None = None
        self.mismatches = 0

    @property
    def offset(self) -> int:
        return self.start + self.done

    @property
    def remaining(self) -> int | None:
        return None if self.end is None else self.end - self.offset


class _DownloadRequests:
    """What a download needs of its client (never the client itself)."""

    def __init__(
        self,
        headers: dict[str, str],
        deadline: _Deadline,
        send: Callable[[dict[str, str]], _PooledResponse],
        retry: Callable[..., Any],
        pool: _ConnectionPool,
        secrets: _Secrets,
        timeout: float | None,
    ):
        self.headers, self.deadline, self.send, self.retry = headers, deadline, send, retry
        self.pool, self.secrets, self.timeout = pool, secrets, timeout


class _Parts:
    def __init__(self, connections: int, work: Callable[[threading.Event], None]):
        self.lock = _thread.allocate_lock()
        self.all = [_Part(0, None)]
        self.connections, self.work = connections, work
        self.threads: list[tuple[threading.Thread, threading.Event]] = []
        self.caller = _thread.get_ident()
        self.error: BaseException | None = None
        # A 200 cut into parts: a range answered whole merges into it.
        self.whole_file_response: _PooledResponse | None = None

    @property
    def total(self) -> int | None:
        return self.all[-1].end

    def next(self) -> _Part | None:
        """The first part not complete that no thread fetches, taken."""
        with self.lock:
            for part in self.all:
                if self.error is None and not part.taken and part.remaining != 0:
                    part.taken = True
                    return part
        return None

    def contiguous(self) -> int:
        """How far from the start the file is complete (and checked)."""
        end = 0
        for part in self.all:
            end = part.offset if part.check is None else part.check.start
            if part.remaining != 0 or part.check is not None:
                break
        return end

    def check_running(self, part: _Part | None = None) -> None:
        if self.error is not None or (part is not None and part.dropped):
            raise _PartStopped

    def start_threads(self) -> None:
        import threading

        while len(self.threads) < min(self.connections, len(self.all)) - 1:
            ended = threading.Event()
            thread = threading.Thread(
                target=self.work, args=(ended,), name="dataset-client-part", daemon=True
            )
            self.threads.append((thread, ended))
            thread.start()

    def wait_threads(self) -> None:
        # 3.11, 3.12: a join() Ctrl-C interrupts takes the thread for ended while it runs.
        for thread, ended in self.threads:
            ended.wait()
            thread.join()


class _Checks:
    def __init__(self, download: _Transfer, sha256: str | None):
        self.download, self.parts, self.target = download, download.parts, download.target
        self.sha256 = [] if sha256 is None else [_Stated("sha256", "sha-256", sha256)]
        self.digests: list[_Stated] | None = None
        self.digest: _Digest | None = None
        self.verified: list[str] = []

    @property
    def stated(self) -> list[_Stated]:
        return [*self.sha256, *(self.digests or ())]

    def start(self) -> None:
        """Start hashing (again) when a digest needs another algorithm."""
        names = {stated.hash for stated in self.stated}
        if names and not (self.digest is not None and names <= self.digest.hashes.keys()):
            if self.digest is not None:
                self.digest.close()
            self.digest = _Digest(self.target, names)
            self.digest.add(self.parts.contiguous())

    def take(self, response: _PooledResponse, *, whole: bool) -> None:
        """Note the first response's digests (a Content-Digest: a plain 200's)."""
        plain = whole and response.encoding == "identity"
        names = ["Repr-Digest", "Content-Digest", "Digest"] if plain else ["Repr-Digest", "Digest"]
        self.digests = [d for name in names for d in _parse_digests(response.headers, name)]
        self.start()

    def other_version(self, response: _PooledResponse) -> bool:
        """Whether its Repr-Digest differs from the first response's."""
        stated = _parse_digests(response.headers, "Repr-Digest")
        return any(
            first.header == "Repr-Digest"
            and first.algorithm == d.algorithm
            and first.value != d.value
            for first in self.digests or ()
            for d in stated
        )

    def close(self, keep: _Part | None = None) -> None:
        """End the parts' hashing (but ``keep``'s), without ``keep`` the file's."""
        for part in self.parts.all:
            if part.check is not None and part is not keep:
                part.check.close()
                part.check = None
        if self.digest is not None and keep is None:
            self.digest.close()

    def start_part_check(self, response: _PooledResponse, part: _Part) -> None:
        # A response cut short: its bytes stay unchecked.
        if part.check is not None:
            part.check.close()
        part.check = part.deferred = None
        stated = _parse_digests(response.headers, "Content-Digest")
        if not stated or response.encoding != "identity":
            return
        chosen = next(d for name in _DIGEST_ALGORITHMS for d in stated if d.algorithm == name)
        # In a file, read back: checked at the end, if the file's digest fails.
        if self.target.read_at is not None and self.digest is not None:
            part.deferred = (part.offset, chosen)
            return
        # Held bytes that did not fit would wait for room only their release makes.
        size = part.remaining
        held = size is not None and self.target.can_hold(size + self.download.limits.chunk)
        part.check = _PartCheck(part.offset, chosen, held)

    def received(self, part: _Part, data: bytes) -> None:
        """(Under the parts' lock) hash ``data`` received into ``part``."""
        if part.check is not None:
            part.check.add(data)
        if self.digest is None or self.target.hashes_in_order:
            return
        # One stream: its bytes as they come; parts: what is complete, read back.
        one = len(self.parts.all) == 1 and (part.check is None or self.target.read_at is None)
        self.digest.add(data if one else self.parts.contiguous())

    def verify_part(self, part: _Part) -> bool:
        """False when a 206 failed its Content-Digest (fetched again)."""
        check = part.check
        if check is None:
            return True
        if not self._matches(part, check):
            return False
        with self.parts.lock:
            part.check = None
            if self.digest is not None and self.target.read_at is not None:
                self.digest.add(self.parts.contiguous())
        if self.target.release():
            with self.parts.lock:
                self.download.report()
        return True

    def _matches(self, part: _Part, check: _PartCheck) -> bool:
        """False when ``part`` fails ``check`` (fetched again once; then raised)."""
        actual = check.hexdigest(check.stated.hash)
        if actual == check.stated.value:
            return True
        where = f"bytes {check.start}-{part.offset - 1}"
        self.target.discard(part, check.start)
        with self.parts.lock:
            part.check = None
            part.mismatches += 1
            again = check.held and part.mismatches < 2
            if again:
                part.done = check.start - part.start
                self.download.report()
        if not again:
            self.mismatch(check.stated, actual, f" ({where})")
        message = "Content-Digest (%s) mismatch, %s: fetched again"
        self.download.log(_WARNING, message, check.stated.algorithm, where)
        return False

    def mismatch(self, stated: _Stated, actual: str, where: str = "") -> NoReturn:
        if self.target.state is not None:
            self.target.state.remove()
        url = self.download.url
        expected = stated.value
        message = f"{stated.name} mismatch for {url}{where}: expected {expected}, got {actual}"
        raise ChecksumMismatchError(message, url=url, expected=expected, actual=actual)

    def verify_file(self) -> bool:
        """Check the file; True when parts failing a deferred Content-Digest are refetched."""
        if self.digest is None:
            return False
        for stated in self.stated:
            actual = self.digest.hexdigest(stated.hash)
            if actual == stated.value:
                continue
            again = False
            for part in self.parts.all:
                if self.target.read_at is not None and part.deferred is not None:
                    check = _PartCheck(*part.deferred, True, self.target)
                    check.add(part.offset)
                    if not self._matches(part, check):
                        part.taken = False
                        part.deferred = None
                        again = True
            if not again:
                self.mismatch(stated, actual)
            self.close()
            self.digest = None
            self.start()
            return True
        self.verified = [stated.name for stated in self.stated]
        return False


class _Acceptance:
    """A 206 must bring the range asked for, a 200 the whole file."""

    def __init__(self, download: _Transfer):
        self.download, self.parts, self.target = download, download.parts, download.target
        self.checks = download.checks
        self.validator: str | None = None

    def request_headers(self, part: _Part, headers: dict[str, str]) -> dict[str, str]:
        if self.validator is None or (part.done == 0 and len(self.parts.all) == 1):
            return headers
        last = "" if part.end is None or part.end == self.parts.total else str(part.end - 1)
        return {**headers, "Range": f"bytes={part.offset}-{last}", "If-Range": self.validator}

    def accept(self, response: _PooledResponse, part: _Part, *, ranged: bool) -> _Part:
        """The part its body fills: ``part``, or the whole file."""
        self.parts.check_running(part)
        if response.status == 206:
            self._accept_range(response, part, ranged=ranged)
            if self.checks.digests is None:
                self.checks.take(response, whole=False)
            self.checks.start_part_check(response, part)
        elif ranged and not (len(self.parts.all) == 1 and part is self.parts.all[0]):
            part = self._refused_range(response)
        else:
            if part.done:
                part = self.start_over()
                part.taken = True
            self.validator = _validator(response.headers)
            part.end = response.length
            self.target.reserve(self.parts.total)
            self.checks.take(response, whole=True)
            self._split(response)
        return part

    def take_up(self, validator: str, spans: list[tuple[int, int, int]]) -> None:
        """The parts ``(start, end, done)`` and digests a run kept."""
        self.parts.all = [_Part(*span) for span in spans]
        self.validator = validator
        # All in: the last byte asked again, with If-Range: is the file the same?
        if all(part.remaining == 0 for part in self.parts.all):
            next(part for part in reversed(self.parts.all) if part.done).done -= 1
        digests = getattr(self.target.state, "saved", {}).get("digests")
        if isinstance(digests, list) and all(map(_is_saved_digest, digests)):
            self.checks.digests = [_Stated(*digest) for digest in digests]

    def start_over(self) -> _Part:
        self.checks.close()
        first = _Part(0, None)
        self.parts.all = [first]
        self.validator = self.parts.error = self.checks.digests = self.checks.digest = None
        self.target.reset()
        self.checks.start()
        return first

    def _accept_range(self, response: _PooledResponse, part: _Part, *, ranged: bool) -> None:
        """Exactly the bytes asked for, of the same version."""
        given = response.headers.get("Content-Range")
        parsed = _content_range(given or "")
        known = self.parts.total
        total = None if parsed is None else parsed[2]
        changed = total != known and None not in (total, known)
        changed |= _validator(response.headers) not in (None, self.validator)
        if ranged and (changed or self.checks.other_version(response)):
            raise _FileChanged
        if parsed is None:
            if given is None:
                raise _invalid(response, "a 206 without Content-Range")
            raise _invalid(response, f"a malformed Content-Range {_shortened(given)!r}")
        first, last, total = parsed
        end = part.end if part.end is not None else total
        if end is None:
            unknown = "a 206 of a file of unknown length (Content-Range total '*'): refused"
            raise _invalid(response, unknown)
        if not ranged or first != part.offset or last + 1 != end:
            got = f"got Content-Range {_shortened(given or '')!r}"
            raise _invalid(response, f"asked to resume at byte {part.offset}, {got}")
        if response.length is not None and response.length != last + 1 - first:
            raise _invalid(response, "its Content-Length and Content-Range disagree")
        part.end = end

    def _refused_range(self, response: _PooledResponse) -> _Part:
        """A range answered whole: one part (the first response's while read, else this)."""
        same = response.status == 200 and _validator(response.headers) == self.validator
        if not same or self.checks.other_version(response):
            raise _FileChanged
        parts = self.parts
        with parts.lock:
            streaming = parts.whole_file_response is not None
            whole = parts.all[0] if streaming else _Part(0, parts.total, parts.contiguous())
            whole.end = parts.total
            whole.taken = True
            self.checks.close(keep=whole)
            for part in parts.all:
                part.dropped = part is not whole
            parts.all, parts.connections = [whole], 1
            if not streaming:
                parts.whole_file_response = response
        self.target.discard(None, whole.offset)
        if streaming:
            raise _PartStopped
        ignored = "the server ignores ranges: one stream from %s on"
        self.download.log(_INFO, ignored, _size(whole.done))
        skip = whole.done
        while skip > 0:
            data = response.read(min(skip, _CHUNK_SIZE))
            if not data:
                break
            skip -= len(data)
        return whole

    def _split(self, response: _PooledResponse) -> None:
        """Cut the file into parts when the server serves ranges (a strong ETag)."""
        total = self.parts.total or 0
        connections = self.parts.connections
        count = min(connections, total // _MIN_PART_SIZE)
        if connections > 1 and 0 < total < 2 * _MIN_PART_SIZE and "logging" in sys.modules:
            small = "one stream, not %d connections: %s is too small for parts of at least 1 MiB"
            self.download.log(_DEBUG, small, connections, _size(total))
        ranges = response.headers.get("Accept-Ranges", "").strip().lower()
        if count < 2 or ranges != "bytes" or not (self.validator or "").startswith('"'):
            return
        count = self.target.part_count(total, count, connections)
        # Before the others start: see _refused_range.
        self.parts.whole_file_response = response
        bounds = [total * index // count for index in range(count + 1)]
        self.parts.all[0].end = bounds[1]
        self.parts.all += [_Part(start, end) for start, end in itertools.pairwise(bounds[1:])]
        self.parts.start_threads()


def _check_in_time(requests: _DownloadRequests, url: str) -> None:
    requests.deadline.wait(None, "GET", url)
    if requests.pool.closed:
        text = f"the DatasetClient was closed during GET {url}"
        raise ClientClosedError(text, method="GET", url=url)


class _Transfer:
    """One download: its _Parts fetched, accepted (_Acceptance), checked (_Checks)."""

    def __init__(
        self,
        requests: _DownloadRequests,
        url: str,
        target: _FileTarget | _StreamTarget,
        progress: _Progress | None,
        sha256: str | None,
        connections: int,
        limits: _Limits,
    ):
        self.requests, self.url, self.progress, self.limits = requests, url, progress, limits
        self.target: _Sink = target
        if isinstance(target, _StreamTarget) and connections > 1:
            limit = min(_MAX_REORDER_BYTES, connections * _CHUNK_SIZE)
            self.target = _ReorderBuffer(target, limit, self._written_to_stream, target.in_time)
        self.parts = _Parts(connections, self._work)
        self.checks = _Checks(self, sha256)
        self.acceptance = _Acceptance(self)
        # in_clear: redirected from https:// to http://.
        self.resume_refused = self.in_clear = False
        # What an earlier run left: said once the server takes it up.
        self.kept: tuple[str, str] | None = None
        kept = target.take_up(url)
        if kept is not None:
            validator, spans = kept
            self.acceptance.take_up(validator, spans)
            self.kept = (_size(self._written), _size(spans[-1][1]))

    @property
    def _written(self) -> int:
        """Bytes at the destination (a stream in parts: written in order)."""
        position = self.target.position
        return sum(part.done for part in self.parts.all) if position is None else position

    def log(self, level: int, message: str, *arguments: object) -> None:
        shown = _showable_url(self.url, self.requests.secrets)
        # The record's "event": what happened, without the request.
        event = {"event": message % arguments}
        _logger().log(level, f"{message}, GET %s", *arguments, shown, extra=event)

    def run(self) -> None:
        try:
            self.checks.start()
            for restarts in itertools.count():
                try:
                    return self._fetch_all()
                except _FileChanged as changed:
                    if restarts == _MAX_RESTARTS:
                        tries = f"during each of {restarts + 1} tries"
                        text = f"GET {self.url}: the file changed on the server {tries}"
                        raise InvalidResponseError(text, method="GET", url=self.url) from None
                    self.resume_refused |= isinstance(changed, _ResumeRefused)
                    self.log(_INFO, "starting over: %s", changed.reason)
                    self.acceptance.start_over()
        except DatasetClientError as error:
            _redact_error(error, self.requests.secrets.shown())
            raise
        finally:
            self.checks.close()

    def _fetch_all(self) -> None:
        self.parts.threads = []
        self.parts.start_threads()
        self._work()
        try:
            threads = self.parts.threads
            self.target.write_until(lambda: all(ended.is_set() for _, ended in threads))
            self.parts.wait_threads()
        except BaseException as exc:
            self._fail(exc)
            self.parts.wait_threads()
            raise
        if self.parts.error is not None:
            raise self.parts.error
        self.target.finish(self.parts.total)
        if self.checks.verify_file():
            self._fetch_all()

    def _work(self, ended: threading.Event | None = None) -> None:
        try:
            while (part := self.parts.next()) is not None:
                with contextlib.suppress(_PartStopped):
                    self._fetch(part)
        except BaseException as exc:
            # Ctrl-C included: every part stops.
            self._fail(exc)
        finally:
            if ended is not None:
                ended.set()
                self.target.wake()

    def _fetch(self, part: _Part) -> None:
        attempts = 0

        def attempt() -> bool:
            nonlocal attempts, part
            self.parts.check_running(part)
            attempts += 1
            headers = self.acceptance.request_headers(part, self.requests.headers)
            try:
                response = self._send(headers)
                try:
                    part = self.acceptance.accept(response, part, ranged="Range" in headers)
                    with self.parts.lock:
                        self.report()
                        # Said once the server takes it up (a 200 does not).
                        kept = self.kept
                        self.kept = None
                    if kept and response.status == 206:
                        self.log(_INFO, "resuming: %s of %s already downloaded", *kept)
                    elif response.status == 206 and part.done and attempts > 1:
                        at = (_size(part.offset), _size(self.parts.total or 0))
                        self.log(_INFO, "resuming at %s of %s after an interruption", *at)
                    self._copy_body(response, part)
                    if response.status == 206 and response.read(1):
                        raise _invalid(response, "the 206 body runs past its Content-Range")
                finally:
                    with self.parts.lock:
                        if response is self.parts.whole_file_response:
                            self.parts.whole_file_response = None
                    response.close()
            except DatasetClientError:
                # Ended by _fail: stop, not retry.
                self.parts.check_running()
                raise
            if part.end is None:
                part.end = part.offset
                with self.parts.lock:
                    self.report()
            elif part.remaining:
                expected = part.end - part.start
                fields = dict(method="GET", url=response.url, expected=expected, received=part.done)
                cut = f"GET {response.url}: connection closed after "
                received = ("received", f"{part.done}")
                of = ("expected", f"{expected} bytes")
                raise _named(IncompleteResponseError, cut, received, " of ", of, **fields)
            return self.checks.verify_part(part)

        while not self.requests.retry(attempt, lambda: part.done):
            pass

    def _send(self, headers: dict[str, str]) -> _PooledResponse:
        try:
            response = self.requests.send(headers)
        except ServiceError as error:
            if error.status == 416 and "Range" in headers and not self.resume_refused:
                raise _ResumeRefused from None
            raise
        self.in_clear |= self.url.startswith("https:") and response.url.startswith("http:")
        # Measured from here, the head in.
        if self.limits.min_rate is not None:
            response.watch = _Watch(self.requests.timeout, self.limits.min_rate)
        return response

    def _copy_body(self, response: _PooledResponse, part: _Part) -> None:
        """Into ``part``, never past its end (a merge may move it)."""
        chunk = self.limits.chunk
        while True:
            left = part.remaining
            data = response.read(min(chunk, left or chunk)) if left is None or left > 0 else b""
            if not data:
                with self.parts.lock:
                    if response is not self.parts.whole_file_response:
                        return
                    # Parts merged into this one: it reads on (no merge comes after).
                    self.parts.whole_file_response = None
                continue
            self.parts.check_running(part)
            self.target.put(part, data)
            with self.parts.lock:
                self.parts.check_running(part)
                part.done += len(data)
                self.checks.received(part, data)
                self.report()
            self.limits.take(len(data), self.requests.deadline)

    def _written_to_stream(self, data: bytes) -> None:
        if self.checks.digest is not None:
            self.checks.digest.add(data)
        if self.progress is not None:
            self.progress(self._written, self.parts.total)

    def report(self) -> None:
        """(Under the parts' lock) save the state for a resume; report progress."""
        state = self.target.state
        validator = self.acceptance.validator
        total = self.parts.total
        if state is not None and validator is not None and total is not None:
            parts = [[part.start, part.end, part.done] for part in self.parts.all]
            digests = [[d.header, d.algorithm, d.value] for d in self.checks.digests or ()]
            saved = {"url": self.url, "validator": validator, "total": total}
            state.save({**saved, "parts": parts, "digests": digests})
        if self.progress is not None:
            self.progress(self._written, total)

    def _fail(self, error: BaseException) -> None:
        with self.parts.lock:
            self.parts.error = self.parts.error or error
        self.target.stop()
        idents = {thread.ident or 0 for thread, _ in self.parts.threads}
        self.requests.pool.interrupt({self.parts.caller, *idents})


def _checked_state(saved: Any, url: str) -> tuple[str, list[tuple[int, int, int]]] | None:
    """The validator and parts ``(start, end, done)`` of a sound state saved for ``url``."""
    if not isinstance(saved, dict) or saved.get("url") != url:
        return None
    validator, total, parts = saved.get("validator"), saved.get("total"), saved.get("parts")
    try:
        _check_header_value(validator, "validator")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    spans = []
    position = 0
    for span in parts if isinstance(parts, list) else ():
        if not (isinstance(span, list) and len(span) == 3 and all(map(_is_offset, span))):
            return None
        start, end, done = span
        if start != position or start + done > end:
            return None
        spans.append((start, end, done))
        position = end
    if validator and spans and _is_offset(total) and position == total:
        return validator, spans
    return None


def _is_offset(value: Any) -> bool:
    return type(value) is int and value >= 0


class _Limits:
    def __init__(self, min_rate: float | None, max_rate: float | None):
        self.min_rate = _check_positive(min_rate, "min_rate")
        self.rate = max_rate
        self.chunk = _CHUNK_SIZE
        if max_rate is not None:
            if _check_number(max_rate, "max_rate", positive=True, none=True) < 1:
                least = f"must be at least 1 (bytes per second), got {max_rate!r}"
                raise _refused("max_rate", least)
            # Smaller reads: shorter waits, a steadier rate.
            self.chunk = max(16384, min(_CHUNK_SIZE, int(max_rate / 8)))
        self.lock = _thread.allocate_lock()
        self.started, self.taken = time.monotonic(), 0

    def take(self, count: int, deadline: _Deadline) -> None:
        """Wait as ``max_rate`` asks, never past ``deadline``."""
        if self.rate is None:
            return
        with self.lock:
            self.taken += count
            wait = self.started + self.taken / self.rate - time.monotonic()
        wait = min(wait, deadline.left())
        if wait > 0:
            time.sleep(wait)


def _content_range(value: str) -> tuple[int, int, int | None] | None:
    """First, last byte and total (None: ``*``), RFC 9110 14.4."""
    # At most 19 digits: a file offset holds no more (int() refuses thousands).
    match = re.fullmatch(r"\s*bytes\s+(\d{1,19})-(\d{1,19})/(\d{1,19}|\*)\s*", value)
    if match is None:
        return None
    first, last, total = int(match[1]), int(match[2]), None if match[3] == "*" else int(match[3])
    return None if max(first, last, total or 0) > _MAX_SIZE else (first, last, total)


def _validator(headers: http.client.HTTPMessage) -> str | None:
    """For If-Range: a strong ETag, else Last-Modified."""
    etag = headers.get("ETag")
    return etag if etag and not etag.startswith("W/") else headers.get("Last-Modified")


class _Digest:
    """Hashes in order: the first ``inline`` bytes here, the rest on a thread."""

    inline = _CHUNK_SIZE

    def __init__(self, sink: _Sink | None, algorithms: Iterable[str]):
        self.read_at = None if sink is None else sink.read_at
        self.hashes = {name: hashlib.new(name) for name in algorithms}
        self._position = self._inline = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._jobs = None if self.inline else self._start()

    def add(self, job: bytes | int) -> None:
        """Hash bytes that follow, or (an offset) the file read back to there."""
        if self._jobs is None:
            size = len(job) if isinstance(job, bytes) else job - self._position
            if self._inline + size <= self.inline:
                self._inline += max(size, 0)
                if self._error is None:
                    try:
                        self._hash(job)
                    except OSError as exc:
                        self._error = exc
                return
            self._jobs = self._start()
        self._jobs.put(job)

    def hexdigest(self, algorithm: str) -> str:
        self.close()
        if self._error is not None:
            raise self._error
        return self.hashes[algorithm].hexdigest()

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._jobs.put(None)  # type: ignore[union-attr]
            self._thread.join()

    def _start(self) -> queue.Queue[bytes | int | None]:
        import queue
        import threading

        jobs: queue.Queue[bytes | int | None] = queue.Queue(_HASH_QUEUE_BYTES // _CHUNK_SIZE)
        # Before it starts: close() after a Ctrl-C in start() ends it.
        self._jobs = jobs
        self._thread = threading.Thread(
            target=self._run, args=(jobs,), name="dataset-client-sha256", daemon=True
        )
        self._thread.start()
        return jobs

    def _run(self, jobs: queue.Queue[bytes | int | None]) -> None:
        while (job := jobs.get()) is not None:
            # hexdigest() raises a failure; later jobs are drained until close().
            try:
                if self._error is None:
                    self._hash(job)
            except BaseException as exc:
                self._error = exc

    def _hash(self, job: bytes | int) -> None:
        while isinstance(job, int) and self._position < job and self.read_at is not None:
            data = self.read_at(self._position, min(_CHUNK_SIZE, job - self._position))
            if not data:
                raise OSError(errno.EIO, "the downloaded file is shorter than was written")
            self._hash(data)
        if isinstance(job, bytes):
            for hash in self.hashes.values():
                hash.update(job)
            self._position += len(job)


class _PartCheck(_Digest):
    """A 206's Content-Digest from ``start`` (``held``: its bytes until it checks)."""

    # Its thread starts with it: a parallel download's parts are large.
    inline = 0

    def __init__(self, start: int, stated: _Stated, held: bool, sink: _Sink | None = None):
        super().__init__(sink, (stated.hash,))
        self.start, self.stated, self.held, self._position = start, stated, held, start


def _is_saved_digest(saved: Any) -> bool:
    if not (isinstance(saved, list) and len(saved) == 3 and all(isinstance(s, str) for s in saved)):
        return False
    header, algorithm, value = saved
    return (
        header in ("Repr-Digest", "Content-Digest", "Digest")
        and algorithm in _DIGEST_ALGORITHMS
        and len(value) == 2 * hashlib.new(_DIGEST_ALGORITHMS[algorithm]).digest_size
        and set(value) <= set("0123456789abcdef")
    )


def _parse_digests(headers: http.client.HTTPMessage, header: str) -> list[_Stated]:
    """The sha-256 and sha-512 members of ``header`` (RFC 9530, 3230)."""
    import binascii

    digests = []
    for value in headers.get_all(header) or ():
        members = value.split(",", _MAX_DIGEST_MEMBERS)
        if len(members) > _MAX_DIGEST_MEMBERS:
            _logger().debug("ignored the %s members past the first %d", header, _MAX_DIGEST_MEMBERS)
        for member in members[:_MAX_DIGEST_MEMBERS]:
            name, _, encoded = member.partition(";")[0].strip().partition("=")
            # A Structured Fields key is lowercase (RFC 8941 3.2); Digest's, any case.
            algorithm = name.strip()
            if header == "Digest":
                algorithm = algorithm.lower()
            elif len(encoded) > 1 and encoded[0] == encoded[-1] == ":":
                encoded = encoded[1:-1]
            else:
                encoded = ""
            if algorithm not in _DIGEST_ALGORITHMS:
                _logger().debug("ignored a %s of an unknown algorithm: %r", header, name[:40])
                continue
            try:
                raw = binascii.a2b_base64(encoded.strip(), strict_mode=True)
            except binascii.Error:
                raw = b""
            if len(raw) != hashlib.new(_DIGEST_ALGORITHMS[algorithm]).digest_size:
                _logger().debug("ignored a malformed %s %s value", header, algorithm)
                continue
            digests.append(_Stated(header, algorithm, raw.hex()))
    return digests


# ============================================================================
# Sinks
# ============================================================================

# How often a wait that no read ends looks at the deadline and close().
_WAKE_SECONDS = 0.1


def _open_target(
    destination: str | os.PathLike[str] | BinaryIO, resume: bool, in_time: Callable[[], None]
) -> _FileTarget | _StreamTarget:
    """A stream for a file object, device, FIFO (its reader awaited) or descriptor, else a file."""
    if not isinstance(destination, (str, os.PathLike)):
        return _StreamTarget(destination, in_time)
    found = _Directory(_check_destination_path(destination))
    try:
        stream = _open_special_destination(found, in_time)
        if stream is None:
            return _FileTarget(found, resume)
    except BaseException:
        found.close()
        raise
    found.close()
    return _StreamTarget(stream, in_time, opened=True)


def _said_of(destination: str, error: OSError, directory: str) -> OSError:
    """``error`` said of ``destination``, with what keeps files from being made in ``directory``."""
    directory = directory or "."
    problem = ""
    try:
        if not stat.S_ISDIR(os.stat(directory).st_mode):
            problem = f"{directory} is not a directory"
        elif not os.access(directory, os.W_OK | os.X_OK):
            problem = f"the directory {directory} is not writable"
    except FileNotFoundError:
        problem = f"the directory {directory} does not exist"
    except NotADirectoryError:
        problem = f"a part of {directory} is not a directory"
    except OSError:
        pass
    reason = error.strerror or str(error)
    return OSError(error.errno, f"{reason} ({problem})" if problem else reason, destination)


class _Sink:
    """Where a _Transfer's bytes go (these defaults hold nothing back)."""

    state: _StateFile | None = None
    read_at: Callable[[int, int], bytes] | None = None
    write_at: Callable[[int, bytes], None]
    reset: Callable[[], None]
    # Bytes written in order, when not the bytes received.
    position: int | None = None
    # The file's hash is handed each piece written (none can be read back).
    hashes_in_order = False

    def __enter__(self: _T) -> _T:
        return self

    def put(self, part: _Part, data: bytes) -> None:
        self.write_at(part.offset, data)

    def part_count(self, total: int, count: int, connections: int) -> int:
        return count

    def can_hold(self, size: int) -> bool:
        """True when ``size`` bytes under a pending Content-Digest can be fetched again."""
        return self.read_at is not None

    def release(self) -> bool:
        """Write what a Content-Digest that checked held back; True if anything may be."""
        return False

    def discard(self, part: _Part | None, start: int) -> None:
        """Drop what is held back of ``part`` (None: of every part) from ``start`` on."""

    # stop(): the transfer failed, no part may wait here.
    def reserve(self, size: int | None) -> None: ...
    def stop(self) -> None: ...
    def finish(self, total: int | None) -> None: ...
    def write_until(self, ended: Callable[[], bool]) -> None: ...
    def wake(self) -> None: ...


class _FileTarget(_Sink):
    """A file beside the destination, in the directory walked to, moved over it by commit."""

    def __init__(self, found: _Directory, resume: bool):
        self.directory = found
        self.name = found.name
        self.destination = found.given
        self.seeking = _thread.allocate_lock()
        self.stem = _hidden_stem(self.directory, self.name)
        self.temporary = ""
        self.lock_name = ""
        self.committed = False
        try:
            fd = self._open_resumable() if resume else None
            if fd is None:
                # A new temporary file, locked: one of _sweep's, else a random one.
                made = _sweep(self.directory, self.stem, claim=True)
                tries = 100
                while made is None and tries:
                    random_name = f"{self.stem}.part.{os.urandom(6).hex()}"
                    made = _claim(self.directory, random_name, _fcntl())
                    tries -= 1
                if made is None:
                    raise FileExistsError(errno.EEXIST, "cannot create a temporary file")
                fd, self.temporary = made
            else:
                # What a killed download without resume left is removed all the same.
                _sweep(self.directory, self.stem, claim=False)
        except OSError as exc:
            raise _said_of(self.destination, exc, self.directory.path) from None
        self.fd = fd

    def _open_resumable(self) -> int | None:
        """``.NAME.part`` and its state, ours and locked; else None."""
        name = self.stem + ".part"
        try:
            found = _is_own_regular_file(self.directory.status_of(name + ".json"))
            if not found:
                _not_resumable(name + ".json", _NOT_OURS)
                return None
        except FileNotFoundError:
            found = False
        made = True
        try:
            fd: int | None = self.directory.create(name)
        except FileExistsError:
            made = False
            fd = self.directory.open_own(name)
        if fd is None:
            _not_resumable(name, _NOT_OURS)
            return None
        status = os.fstat(fd)
        state = _StateFile(self.directory, name + ".json", status.st_ino)
        try:
            # Still that file once locked: its holder may have committed it since.
            if self._lock(fd) and self.directory.holds(status, name):
                # A new partial file takes up nothing (a state without one is dropped).
                if made:
                    state.ours = found
                else:
                    state.load(found)
                self.temporary = name
                self.state = state
        finally:
            if self.state is None:
                self._unlock()
                os.close(fd)
        return None if self.state is None else fd

    def _lock(self, fd: int) -> bool:
        fcntl = _fcntl()
        if fcntl is None:  # not on Linux: Windows has no flock
            return self._lock_with_a_file()
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        return False

    def _lock_with_a_file(self) -> bool:
        """``.NAME.part.lock``, made with O_EXCL; taken over when its process is gone."""
        name = self.stem + ".part.lock"
        try:
            self.directory.write_new(name, str(os.getpid()).encode())
        except FileExistsError:
            if not _take_over_abandoned_lock(self.directory, name):
                return False
        self.lock_name = name
        return True

    def _unlock(self) -> None:
        if self.lock_name:
            self.directory.remove(self.lock_name)
            self.lock_name = ""

    def take_up(self, url: str) -> tuple[str, list[tuple[int, int, int]]] | None:
        """The validator and parts an earlier run kept of ``url``'s file; else None (dropped)."""
        if self.state is None:
            return None
        checked = _checked_state(self.state.saved, url)
        # An empty file: no range continues it.
        if checked is None or checked[1][-1][1] == 0:
            self.reset()
            return None
        validator, spans = checked
        size = min(os.fstat(self.fd).st_size, spans[-1][1])
        os.ftruncate(self.fd, size)
        kept = [(start, end, min(done, max(0, size - start))) for start, end, done in spans]
        return validator, kept

    def __exit__(self, *exc_info: object) -> None:
        if not self.committed and not (self.state and self.state.kept):
            self.directory.remove(self.temporary)
            if self.state is not None:
                self.state.remove()
        # After the unlink: the lock keeps other processes off until then.
        os.close(self.fd)
        self._unlock()
        self.directory.close()

    def reset(self) -> None:
        os.ftruncate(self.fd, 0)
        if self.state is not None:
            self.state.remove()

    def reserve(self, size: int | None) -> None:
        if size is None:
            return
        directory = self.directory.path or "."
        free = shutil.disk_usage(directory if self.directory.fd is None else self.directory.fd).free
        if size > free:
            message = f"not enough space for {_size(size)} in {directory} ({_size(free)} free)"
            raise OSError(errno.ENOSPC, message, self.destination)

    def write_at(self, offset: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if _HAS_PWRITE:
                written = os.pwrite(self.fd, view, offset)
            else:  # not on Linux: Windows has no os.pwrite
                with self.seeking:
                    os.lseek(self.fd, offset, os.SEEK_SET)
                    written = os.write(self.fd, view)
            view = view[written:]
            offset += written

    def read_at(self, offset: int, size: int) -> bytes:
        if _HAS_PWRITE:
            return os.pread(self.fd, size, offset)
        with self.seeking:  # not on Linux: Windows has no os.pread
            os.lseek(self.fd, offset, os.SEEK_SET)
            return os.read(self.fd, size)

    def commit(self, total: int | None) -> None:
        """Move the file into place if ``total`` bytes long and still the one written here."""
        status = os.fstat(self.fd)
        size = status.st_size
        try:
            if total is not None and size != total:
                has = ("received", f"{size} bytes")
                raise _named(
                    InvalidResponseError,
                    "the downloaded file has ",
                    has,
                    " where the server announced ",
                    ("expected", f"{total}"),
                    ": not committed",
                    method="GET",
                    received=size,
                    expected=total,
                )
            if not self.directory.holds(status, self.temporary):
                raise PermissionError(errno.EACCES, f"{_SWAPPED}: not committed", self.destination)
            # Made 0600: no one else could write into it once its bytes were hashed.
            if not _WINDOWS:
                os.fchmod(self.fd, _final_mode(self.directory.status))
            try:
                self.directory.replace(self.temporary, self.name)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror or str(exc), self.destination) from None
            # Moved: another download may take the temporary's name from now on.
            self.committed = True
            if not self.directory.holds(status, self.name):
                self._check_replaced_after_the_move()
        finally:
            if self.state is not None:
                self.state.remove()

    def _check_replaced_after_the_move(self) -> None:
        """The user's file there, this one linked nowhere: a later commit (the last wins); else
        the error."""
        with contextlib.suppress(OSError):
            there = self.directory.status_of(self.name)
            if not _is_mine(there):
                self.directory.remove(self.name)
            elif os.fstat(self.fd).st_nlink == 0:
                return
        try:
            self.directory.status_of(self.name)
            left = "left there"
        except OSError:
            left = "removed"
        message = f"{_SWAPPED} and moved into place: {left}"
        raise PermissionError(errno.EACCES, message, self.destination)


_SWAPPED = "another file was put in place of the temporary file"
_NOT_OURS = "not your own regular file: another user's, a link, a directory"


def _not_resumable(name: str, why: object) -> None:
    _logger().warning("%s: not resumable (%s)", name, why, extra={"lasting": True})


class _PartialFile:
    """Where a ``resume=True`` download to ``destination`` keeps its partial file (``path``)."""

    def __init__(self, destination: str):
        self.destination = destination
        found = _Directory(destination)
        stem = _hidden_stem(found, found.name)
        found.close()
        self.descriptor = found.descriptor
        self.file_path = os.path.join(found.path, found.name)
        self.path = os.path.join(found.path, stem + ".part")

    def resumable(self, url: str) -> bool:
        """True when an earlier download of ``url`` (resolved) left it to continue."""
        found = _Directory(self.destination)
        name = os.path.basename(self.path)
        try:
            # No partial file (FileNotFoundError, the common case): its state is not opened.
            ours = _is_own_regular_file(found.status_of(name))
            saved = _read_state(found, name + ".json")
        finally:
            found.close()
        return ours and _checked_state(saved, url) is not None

    def holds(self, sha256: str) -> bool:
        """True when the destination is already the user's own regular file with ``sha256``."""
        path = self.file_path
        try:
            if self.descriptor or not stat.S_ISREG(os.lstat(path).st_mode):
                return False
            fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_BINARY)
        except OSError:
            return False
        with open(fd, "rb") as existing:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode) or not _is_mine(status):
                return False
            return hashlib.file_digest(existing, "sha256").hexdigest() == sha256.lower()

    def remove(self) -> None:
        """Remove it, then its state: only the user's own, when no download holds it (as the
        sweep does; no download opened: it would warn of a neighbour's and make a file)."""
        found = _Directory(self.destination)
        name = os.path.basename(self.path)
        try:
            if _remove_abandoned(found, name, _fcntl()):
                _remove_abandoned(found, name + ".json", None)
        finally:
            found.close()


class _StreamTarget(_Sink):
    """A binary file object (or a device or FIFO opened here): written in order, left open."""

    def __init__(self, stream: BinaryIO, in_time: Callable[[], None], *, opened: bool = False):
        writes = callable(getattr(stream, "write", None)) and not isinstance(stream, io.TextIOBase)
        writable = getattr(stream, "writable", None)
        if not writes or (callable(writable) and not writable()):
            wanted = "a path or a binary file object open for writing"
            raise TypeError(f"destination must be {wanted}, not {type(stream).__name__}")
        self.stream = stream
        self.opened = opened
        try:
            self.start = stream.tell() if stream.seekable() else None
        except OSError:
            self.start = None
        self.in_time = in_time
        # A pipe's, FIFO's or socket's: its reader may stop reading.
        self.poller: Any = None
        try:
            fd = stream.fileno()
            mode = os.fstat(fd).st_mode
        except (AttributeError, TypeError, ValueError, OSError):
            return
        if (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) and hasattr(select, "poll"):
            self.fd = fd
            self.poller = select.poll()
            self.poller.register(fd, select.POLLOUT)
            fcntl = _fcntl()
            # How much a pipe holds, where Linux says (not of a socket).
            try:
                self.size = int(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))
            except (AttributeError, OSError):
                self.size = 0

    def reset(self) -> None:
        if self.start is None:
            message = "the server started the transfer over and the destination cannot seek back"
            raise InvalidResponseError(message)
        self.stream.seek(self.start)
        # Devices cannot be truncated.
        with contextlib.suppress(OSError):
            self.stream.truncate()

    def __exit__(self, *exc_info: object) -> None:
        if self.opened:
            self.stream.close()

    def take_up(self, url: str) -> None: ...
    def commit(self, total: int | None) -> None: ...

    def write_at(self, offset: int, data: bytes) -> None:
        """Write in order; into a pipe, FIFO or socket only what fits without blocking."""
        stream = self.stream
        if self.poller is None:
            return _write_all(stream, data)
        if isinstance(stream, io.BufferedWriter):
            stream.flush()
            stream = stream.raw
        view = memoryview(data)
        start = 0
        while start < len(view):
            if self.poller.poll(_WAKE_SECONDS * 1000):
                # POSIX: what poll() promises; all it holds when empty.
                room = select.PIPE_BUF
                if self.size:
                    import termios

                    queued = _fcntl().ioctl(self.fd, termios.FIONREAD, bytes(4))
                    room = room if int.from_bytes(queued, sys.byteorder) else self.size
                _write_all(stream, view[start : start + room])
                start += room
            self.in_time()


def _write_all(stream: Any, data: bytes | memoryview) -> None:
    while True:
        written = stream.write(data)
        # Buffered streams write everything.
        if written is None or written >= len(data):
            return
        if written <= 0:
            raise OSError(errno.EIO, "the destination's write() made no progress")
        data = data[written:]


class _ReorderBuffer(_Sink):
    """Parallel parts into a stream, in order, by the caller's thread; ``limit`` bytes wait here."""

    hashes_in_order = True
    # A server may announce 2**63 - 1 bytes.
    max_parts = 1 << 14

    def __init__(
        self,
        target: _Sink,
        limit: int,
        written: Callable[[bytes], None],
        in_time: Callable[[], None],
    ):
        import threading

        self.target = target
        self.limit = limit
        self.written = written
        self.in_time = in_time
        self.condition = threading.Condition(_thread.allocate_lock())
        self.chunks: dict[int, tuple[bytes, _Part]] = {}
        self.position: int = 0
        self.buffered = 0
        self.peak = 0
        # The writer is in release().
        self.writing = False
        self.stopped = False
        self.writer = _thread.get_ident()

    def put(self, part: _Part, data: bytes) -> None:
        offset = part.offset
        size = len(data)
        while True:
            with self.condition:
                if self.stopped or offset + size <= self.position + max(self.limit, size):
                    if self.stopped or part.dropped:
                        raise _PartStopped
                    self.chunks[offset] = (data, part)
                    self.buffered += size
                    self.peak = max(self.peak, self.buffered)
                    break
                # Others wait for the room the writer makes.
                if _thread.get_ident() != self.writer:
                    self._wait()
                    continue
            self._write_when_there()
        self.release()

    def _write_when_there(self, ended: Callable[[], bool] = lambda: False) -> None:
        """(The writer) wait until the bytes at the position are there, or ``ended()``."""
        with self.condition:
            while not self.stopped and not ended() and not self._ready():
                self._wait()
        self.release()

    def _wait(self) -> None:
        """(Under the lock) wait a while for another thread; end if the call must."""
        self.condition.wait(_WAKE_SECONDS)
        self.in_time()

    def write_until(self, ended: Callable[[], bool]) -> None:
        while not ended():
            self._write_when_there(ended)
        self.release()

    def wake(self) -> None:
        with self.condition:
            self.condition.notify_all()

    def _ready(self) -> bool:
        """(Under the lock) the bytes at the position are there and may be written."""
        chunk = self.chunks.get(self.position)
        if chunk is None:
            return False
        check = chunk[1].check
        return check is None or not check.held or self.position < check.start

    def release(self) -> bool:
        """Write what lies at the position (the writer; another thread wakes it)."""
        with self.condition:
            if self.writing or _thread.get_ident() != self.writer:
                self.condition.notify_all()
                return True
            self.writing = True
        try:
            while True:
                with self.condition:
                    if self.stopped or not self._ready():
                        return True
                    data, _ = self.chunks.pop(self.position)
                    self.buffered -= len(data)
                # Unlocked: a signal interrupts it.
                self.target.write_at(self.position, data)
                with self.condition:
                    self.position += len(data)
                    self.condition.notify_all()
                self.written(data)
        finally:
            with self.condition:
                self.writing = False
                self.condition.notify_all()

    def discard(self, part: _Part | None, start: int) -> None:
        with self.condition:
            for offset, (data, owner) in list(self.chunks.items()):
                if offset >= start and (part is None or owner is part):
                    del self.chunks[offset]
                    self.buffered -= len(data)
            self.condition.notify_all()

    def stop(self) -> None:
        with self.condition:
            self.stopped = True
            self.condition.notify_all()

    def finish(self, total: int | None) -> None:
        self.release()
        if self.chunks or (total is not None and self.position != total):
            message = f"the parts of the download did not join up at byte {self.position}"
            raise InvalidResponseError(message)

    def reset(self) -> None:
        with self.condition:
            self.chunks.clear()
            self.buffered = 0
            self.stopped = False
            if self.position:
                self.target.reset()
            self.position = 0

    def part_count(self, total: int, count: int, connections: int) -> int:
        """Parts that each fit their share of the buffer, at most ``max_parts``."""
        return min(-(-total // (self.limit // connections)), self.max_parts)

    def can_hold(self, size: int) -> bool:
        return size <= self.limit


# ============================================================================
# Safe file operations
# ============================================================================

_MAX_STATE_SIZE = 1024 * 1024
# An empty or garbled .part.lock this young may be being written.
_LOCK_WRITE_GRACE = 5.0
_SLOTS = 3  # DESIGN.md: "The temporary file's names"
# With the longest suffix, such a name fits any NAME_MAX (eCryptfs's 143 is the least).
_SHORT_NAME = 143 - len("..part.lock.0123456.claim")
# O_PATH (Linux): a directory one may search but not read is walked too.
_WALK_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_PATH
_HAS_DIRECTORY_DESCRIPTORS = _HAS_GETEUID and os.open in os.supports_dir_fd
# A process's descriptors, where a walk reaches them (/dev/fd: a directory on BSD and macOS).
_DESCRIPTOR_DIRECTORY = r"/(?:dev|proc/(self|thread-self|[0-9]+)(?:/task/[0-9]+)?)/fd"


class _StateFile:
    """A resumable download's state (``.NAME.part.json``; only the lock holder saves). ``kept``:
    on disk; ``ours``: this download's (found or saved), the only one removed."""

    def __init__(self, directory: _Directory, name: str, ino: int):
        self.directory = directory
        self.name = name
        self.temporary = name + ".tmp"
        # The partial file's inode alone: remounts change st_dev.
        self.file = [ino]
        self.saved: Any = None
        self.kept = self.ours = self.failed = False

    def load(self, found: bool) -> None:
        saved = _read_state(self.directory, self.name)
        # Of another .part (renamed in since; none: older): dropped.
        file = saved.get("file", self.file) if isinstance(saved, dict) else self.file
        if not isinstance(file, list) or file[-1:] != self.file:
            saved = None
        self.saved = saved
        self.kept = self.saved is not None
        self.ours = found or self.kept

    def save(self, state: dict[str, Any]) -> None:
        """Record ``state`` (0600: the URL may hold a signature) whole; once that fails, no more."""
        if self.failed:
            return
        state["file"] = self.file
        data = json.dumps(state).encode()
        try:
            try:
                self.directory.write_new(self.temporary, data, self.name)
            except FileExistsError:
                # Left by a save cut short (removed), or a neighbour's: then a name no one guesses.
                if not _remove_abandoned(self.directory, self.temporary, None):
                    self.temporary = f"{self.name}.{os.urandom(4).hex()}.tmp"
                self.directory.write_new(self.temporary, data, self.name)
            self.kept = self.ours = True
        except OSError as exc:
            self.failed = True
            self.kept = self.ours = False
            _not_resumable(self.name, exc.strerror or exc)

    def remove(self) -> None:
        if self.ours:
            self.directory.remove(self.name)
        self.kept = self.ours = False


def _sweep(directory: _Directory, stem: str, *, claim: bool) -> tuple[int, str] | None:
    """Remove what kill -9 left at ``STEM.part.1``-3; with ``claim``, make and lock one free."""
    fcntl = _fcntl()
    made = None
    for slot in range(1, _SLOTS + 1):
        name = f"{stem}.part.{slot}"
        if claim and made is None:
            made = _claim(directory, name, fcntl)
        elif fcntl is not None:  # without flock (Windows) none is known to be abandoned
            _remove_abandoned(directory, name, fcntl)
    return made


def _claim(directory: _Directory, name: str, fcntl: Any) -> tuple[int, str] | None:
    """``name`` made and locked; None when taken (but by what kill -9 left: removed first)."""
    for _ in range(2):
        try:
            fd = directory.create(name)
        except FileExistsError:
            if fcntl and _remove_abandoned(directory, name, fcntl):
                continue
            return None
        # Until locked, another download's sweep may take it for abandoned (and unlink it).
        with contextlib.suppress(OSError):
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_nlink:
                return fd, name
        os.close(fd)
        return None
    return None


def _remove_abandoned(directory: _Directory, name: str, fcntl: Any) -> bool:
    """Remove ``name`` if kill -9 left it: the user's own regular file, one link, unlocked
    (``fcntl`` None: the caller's lock keeps downloads off it)."""
    fd = directory.open_own(name)
    if fd is None:
        return False
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Locked here, it stays at its name: no other sweep can have removed it since.
        if directory.holds(os.fstat(fd), name):
            directory.remove(name)
            return True
    except OSError:
        pass
    finally:
        os.close(fd)
    return False


def _final_mode(earlier: os.stat_result | None) -> int:
    """``earlier``'s mode if the user's own file (as curl -o keeps it), else 0666 less the umask."""
    if earlier and stat.S_ISREG(earlier.st_mode) and _is_mine(earlier):
        return earlier.st_mode & 0o777
    # Read (line 2; line 1 is at most 67 bytes), not set and set back: racing other threads.
    with contextlib.suppress(OSError, LookupError), open("/proc/self/status", "rb", 0) as status:
        return 0o666 & ~int(status.read(128).split(b"\nUmask:")[1].split()[0], 8)
    mask = os.umask(0o077)
    os.umask(mask)
    return 0o666 & ~mask


def _is_own_regular_file(status: os.stat_result) -> bool:
    return stat.S_ISREG(status.st_mode) and status.st_nlink == 1 and _is_mine(status)


def _is_mine(status: os.stat_result, *, or_root: bool = False) -> bool:
    """True when the user (or root, with ``or_root``) owns it; always on Windows."""
    return not _HAS_GETEUID or status.st_uid == os.geteuid() or (or_root and status.st_uid == 0)


def _read_state(directory: _Directory, name: str) -> Any:
    """The JSON in the user's own file ``name`` (saved 0600); None when there is none, its group
    or others may write it, it is too large or not JSON."""
    fd = directory.open_own(name)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as file:
        # A teammate may fill one of the user's group-writable files and rename it in.
        if _HAS_GETEUID and os.fstat(fd).st_mode & 0o022:
            return None
        data = file.read(_MAX_STATE_SIZE + 1)
    if len(data) > _MAX_STATE_SIZE:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _hidden_stem(directory: _Directory, name: str) -> str:
    """``.NAME``, the start of the names made beside NAME, shortened within NAME_MAX."""
    encoded = os.fsencode(name)
    if len(encoded) <= _SHORT_NAME:
        return "." + name
    try:
        limit = os.pathconf(directory.path or ".", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # Windows has no pathconf
        limit = 255
    room = limit - 24
    if len(encoded) >= room:
        name = os.fsdecode(encoded[: room - 18]) + "~" + hashlib.sha256(encoded).hexdigest()[:16]
    return "." + name


def _take_over_abandoned_lock(directory: _Directory, name: str) -> bool:
    """Replace an abandoned ``.part.lock`` with this process's own in one step; True when ours."""
    judged = _abandoned_lock(directory, name)
    if judged is None:
        return False
    # Within _hidden_stem's 24 bytes; one directory, one device: its inode's low 28 bits.
    claim = f"{name}.{judged.st_ino & 0xFFFFFFF:07x}.claim"
    try:  # one process at a time checks it is still that file, still abandoned
        os.close(directory.create(claim))
    except OSError:
        return False
    try:
        again = _abandoned_lock(directory, name)
        if again is None or not os.path.samestat(again, judged):
            return False  # taken over meanwhile, and in use
        pid = str(os.getpid()).encode()
        directory.write_new(f"{name}.{os.urandom(4).hex()}.new", pid, name)
        return True
    finally:
        directory.remove(claim)


def _abandoned_lock(directory: _Directory, name: str) -> os.stat_result | None:
    """The status of the user's ``.part.lock`` ``name`` when abandoned; else None."""
    fd = directory.open_own(name)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(fd)
        text = file.read(32).decode("ascii", "replace")
    if text.isdigit() and len(text) <= 10 and 0 < int(text) < 2**31:  # os.kill takes a C int
        return None if _process_exists(int(text)) else status
    # Empty or garbled (killed before it wrote): abandoned once a few seconds old.
    return status if abs(time.time() - status.st_mtime) > _LOCK_WRITE_GRACE else None


def _process_exists(pid: int) -> bool:
    if _WINDOWS:  # not on Linux: there os.kill(pid, 0) would end the process
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if handle:
            kernel32.CloseHandle(handle)
        return bool(handle)
    try:
        os.kill(pid, 0)
    except OSError as exc:  # EPERM: it exists, as another user
        return not isinstance(exc, ProcessLookupError)
    return True


class _Directory:
    """A destination's directory, walked a descriptor at a time (openat, O_NOFOLLOW), each link
    read where it stands (the user's or root's followed, another's refused). Held (``fd``): the
    names beside ``name`` are made, moved and removed in it, never by a path one could re-point
    (by ``path`` where there is none). ``status``: what is at ``name``; ``descriptor``: a
    process's ("own", "other")."""

    def __init__(self, path: str):
        self.given = path
        self.names = path.rstrip("/").split("/")[::-1]
        # As walked: links read where they stood, never realpath (which follows anyone's).
        self.path = "/" if path.startswith("/") else ""
        self.links = 0
        self.fd = os.open(self.path or ".", _WALK_FLAGS) if _HAS_DIRECTORY_DESCRIPTORS else None
        self.name = ""
        self.status: os.stat_result | None = None
        self.descriptor = ""
        try:
            while self.names:
                name = self.names.pop()
                if self.names:
                    self.step(name)
                else:
                    self.end(name)
        except BaseException as exc:
            self.close()
            if not isinstance(exc, OSError) or exc.strerror == _NOT_FOLLOWED:
                raise
            raise _said_of(path, exc, os.path.dirname(path)) from None

    def step(self, name: str) -> None:
        """Into the directory ``name``, or where the link ``name`` leads."""
        if name in ("", "."):
            return
        shown = os.path.join(self.path, name)
        if self.fd is not None:
            try:
                fd = os.open(name, _WALK_FLAGS | _O_NOFOLLOW, dir_fd=self.fd)
            except OSError as exc:
                # A link (ELOOP, ENOTDIR), missing, or not to be searched.
                target = _link_target(self, name, shown)
                if target is not None:
                    self.follow(target)
                    return
                if _O_PATH or exc.errno != errno.EACCES:
                    raise OSError(exc.errno, exc.strerror, shown) from None
                # Not readable, and no O_PATH (not on Linux): by path from here.
                fd = None
            # Held first: a Ctrl-C in between never has the old one closed twice.
            old = self.fd
            self.fd = fd
            os.close(old)
        self.path = shown

    def follow(self, target: str) -> None:
        """Walk on where a link leads, from the directory it stands in."""
        self.links += 1
        if self.links > 40:  # the kernel's own limit
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), self.given)
        self.names.extend(target.split("/")[::-1])
        if target.startswith("/"):
            self.path = "/"
            if self.fd is not None:
                old = self.fd
                self.fd = os.open("/", _WALK_FLAGS)
                os.close(old)

    def end(self, name: str) -> None:
        """Look at the last name: a link followed (the walk goes on), else the end."""
        if name in ("", ".", ".."):
            raise ValueError(f"destination is a directory: {self.given!r}")
        self.name = name
        if name.isascii() and name.isdigit():
            match = re.fullmatch(_DESCRIPTOR_DIRECTORY, os.path.abspath(self.path))
            if match:
                own = match[1] in (None, "self", "thread-self", str(os.getpid()))
                self.descriptor = "own" if own else "other"
                return
        try:
            self.status = self.status_of(name)
        except OSError:  # nothing there, or not to be looked at: making the file says why
            self.status = None
        if self.status and stat.S_ISLNK(self.status.st_mode):
            target = _link_target(self, name, os.path.join(self.path, name))
            # None: no longer a link when opened to be read (replaced meanwhile): looked again.
            self.follow(name if target is None else target)
        elif self.given.endswith("/") and not (self.status and stat.S_ISDIR(self.status.st_mode)):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), self.given)

    @property
    def prefix(self) -> str:
        return "" if self.fd is not None else os.path.join(self.path, "")

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)

    def open(self, name: str, flags: int, mode: int = 0o777) -> int:
        return os.open(self.prefix + name, flags | _O_BINARY, mode, dir_fd=self.fd)

    def create(self, name: str, mode: int = 0o600) -> int:
        """A new file, never through a link (FileExistsError): every file made is."""
        return self.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW, mode)

    def open_own(self, name: str) -> int | None:
        """``name`` opened (no link followed, no wait) if the user's own regular file, one link."""
        try:
            fd = self.open(name, os.O_RDWR | _O_NOFOLLOW | _O_NONBLOCK)
        except OSError:
            return None
        if _is_own_regular_file(os.fstat(fd)):
            return fd
        os.close(fd)
        return None

    def status_of(self, name: str) -> os.stat_result:
        return os.lstat(self.prefix + name, dir_fd=self.fd)

    def holds(self, status: os.stat_result, name: str) -> bool:
        with contextlib.suppress(OSError):
            return os.path.samestat(self.status_of(name), status)
        return False

    def replace(self, source: str, target: str) -> None:
        at = self.prefix
        os.replace(at + source, at + target, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def remove(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.prefix + name, dir_fd=self.fd)

    def write_new(self, name: str, data: bytes, replacing: str = "") -> None:
        """A new file of ``data``, moved over ``replacing`` if given; removed on failure."""
        try:
            # The open inside: a signal just after it still removes the file.
            fd = self.create(name)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            if replacing:
                self.replace(name, replacing)
        except FileExistsError:
            raise
        except BaseException:
            self.remove(name)
            raise


def _link_target(directory: _Directory, name: str, shown: str) -> str | None:
    """What the link ``name`` says when the user's or root's; None: no link. Opened as itself
    where there is O_PATH: the link read is the one whose owner was checked."""
    try:
        fd = directory.open(name, _O_PATH | _O_NOFOLLOW) if _O_PATH else -1
        link = os.fstat(fd) if fd >= 0 else directory.status_of(name)
    except OSError:  # making the file will say why
        return None
    try:
        if not stat.S_ISLNK(link.st_mode):
            return None
        if not _is_mine(link, or_root=True):
            raise PermissionError(errno.EACCES, _NOT_FOLLOWED, shown)
        if fd >= 0:
            return os.readlink("", dir_fd=fd)
        return os.readlink(directory.prefix + name, dir_fd=directory.fd)
    finally:
        if fd >= 0:
            os.close(fd)


def _open_special_destination(found: _Directory, in_time: Callable[[], None]) -> BinaryIO | None:
    """The destination opened if a descriptor, FIFO or device (else None), as
    fs.protected_fifos would allow; a FIFO's reader waited for while ``in_time()`` allows."""
    status = found.status
    if found.descriptor == "own":
        try:
            return open(os.dup(int(found.name)), "wb", buffering=0)
        except OverflowError:
            raise OSError(errno.EBADF, "no such file descriptor", found.given) from None
    if found.descriptor:  # another process's: opened anew through its /proc link
        return open(_open_without_waiting(found, os.O_WRONLY | os.O_APPEND, in_time), "wb", 0)
    if status is None or stat.S_ISREG(status.st_mode):
        return None
    if stat.S_ISDIR(status.st_mode):
        raise ValueError(f"destination is a directory: {found.given!r}")
    if not _is_mine(status):
        parent = found.status_of(".")
        if parent.st_mode & 0o1002 == 0o1002 and status.st_uid != parent.st_uid:  # +t, o+w
            what = "a FIFO" if stat.S_ISFIFO(status.st_mode) else "a device or socket"
            message = f"refusing to write to {what} another user made in a sticky world-writable"
            raise PermissionError(errno.EACCES, f"{message} directory", found.given)
    fd = _open_without_waiting(found, os.O_WRONLY | _O_NOFOLLOW, in_time)
    if not os.path.samestat(os.fstat(fd), status):
        os.close(fd)
        message = "the destination was replaced while it was being opened"
        raise PermissionError(errno.EACCES, message, found.given)
    return open(fd, "wb", buffering=0)


def _open_without_waiting(found: _Directory, flags: int, in_time: Callable[[], None]) -> int:
    """``found`` opened to be written, never waiting in open(): a FIFO's reader not there yet
    (ENXIO) is looked for every _WAKE_SECONDS while ``in_time()`` allows; a socket's, never."""
    while True:
        try:
            fd = found.open(found.name, flags | _O_NONBLOCK)
            break
        except OSError as exc:
            name = found.prefix + found.name
            mode = os.stat(name, dir_fd=found.fd).st_mode if exc.errno == errno.ENXIO else 0
            if not stat.S_ISFIFO(mode):
                raise OSError(exc.errno, exc.strerror, found.given) from None
        in_time()
        time.sleep(_WAKE_SECONDS)
    if _O_NONBLOCK:  # written as any stream: a write that would wait is polled for
        os.set_blocking(fd, True)
    return fd


# ============================================================================
# Argument checks
# ============================================================================

# Sets: compiling a pattern at import costs more than the whole module.
_TOKEN_CHARACTERS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
# Left as they are in a URL when its non-ASCII characters are percent-encoded.
_ASCII_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
# Refused in a header value or a URL; a tab is allowed in a header.
_CONTROL_CHARACTERS = frozenset(map(chr, (*range(9), *range(10, 32), 127)))


def _refused(argument: str, why: str, kind: Callable[[str], Exception] = ValueError) -> Exception:
    """``kind``: ``argument`` (a _named piece) ``why``, a signed URL redacted."""
    return _named(kind, (argument, argument), f" {_showable_url(why, _Secrets())}")


def _parse_base_url(base_url: str) -> tuple[str, tuple[str, str, int]]:
    _check_url_characters(base_url, "base_url")
    # "localhost:8000" would parse as the scheme "localhost".
    if "://" not in base_url:
        raise _refused("base_url", f"{base_url!r} has no scheme: did you mean 'http://{base_url}'?")
    parts = _split_http_url(base_url, "base_url")
    if "?" in base_url or "#" in base_url:
        raise _refused("base_url", f"must not have a query or fragment: {base_url!r}")
    path = _percent_encoded(parts.path.rstrip("/"))
    url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    return url, _origin_of(url)


def _check_url_characters(url: str, argument: str) -> None:
    _check_text(url, argument)
    # urlsplit silently drops CR, LF and tab (bpo-43882): refuse them, and spaces, first.
    if not _CONTROL_CHARACTERS.isdisjoint(url) or any(map(str.isspace, url)):
        said = f"must be a URL without whitespace or control characters, got {url!r}"
        raise _refused(argument, said)
    try:
        url.encode()
    except UnicodeEncodeError:
        # A lone surrogate: no request can send it.
        raise _refused(argument, f"holds a character UTF-8 cannot encode: {url!r}") from None


def _split_http_url(url: str, argument: str, base: str = "") -> urllib.parse.SplitResult:
    """``url`` (against ``base``) split, without fragment: http(s), host, port, no user."""
    try:
        parts = urllib.parse.urlsplit(url)
        # An absolute URL is its own resolution: urljoin would only put it together again.
        if not (parts.scheme and parts.netloc):
            parts = urllib.parse.urlsplit(urllib.parse.urljoin(base, url))
        parts.port  # noqa: B018 (it validates the port)
        # Encoded as getaddrinfo will encode it.
        urllib.parse.unquote(parts.hostname or "").encode("idna")
    except ValueError as exc:
        raise _refused(argument, f"has an invalid host or port: {exc}") from None
    # urlsplit has made the scheme lower case.
    if parts.scheme not in ("http", "https"):
        scheme = parts.scheme or "no scheme"
        raise _refused(argument, f"must be an http:// or https:// URL, not {scheme!r}")
    if "@" in parts.netloc:
        raise _named(
            ValueError,
            (argument, argument),
            " must not contain a user:password part (pass ",
            ("api_key", "api_key"),
            " or headers instead)",
        )
    if not parts.hostname:
        raise _refused(argument, f"has no host: {url!r}")
    return parts._replace(fragment="") if parts.fragment else parts


def _percent_encoded(text: str) -> str:
    """Non-ASCII percent-encoded (UTF-8): http.client sends ASCII."""
    return text if text.isascii() else urllib.parse.quote(text, safe=_ASCII_PUNCTUATION)


def _check_number(
    value: float, argument: str, *, whole: bool = False, positive: bool = False, none: bool = False
) -> float:
    """Finite, an int if ``whole``, > 0 if ``positive``, else >= 0."""
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        kind = "an int" if whole else "a number"
        raise _refused(argument, f"must be {kind}, not {type(value).__name__}", TypeError)
    finite = _is_finite(value)
    if not (value > 0 if positive else value >= 0) or not finite:
        shown = repr(value) if finite or isinstance(value, float) else "an integer past 1.8e+308"
        least = "above" if positive else "at least"
        message = f"must be {least} 0 and finite, got {shown}"
        raise _refused(argument, f"{message} (None means no limit)" if none else message)
    return value


def _is_finite(value: float) -> bool:
    """Not NaN or infinite, nor an int past a float's range."""
    return abs(value) <= sys.float_info.max


def _check_positive(value: float | None, argument: str) -> float | None:
    return None if value is None else float(_check_number(value, argument, positive=True))


def _check_header_value(value: str, argument: str, *, token: bool = False) -> str:
    """Latin-1, no control characters (a ``token``: ASCII, no space); never shown."""
    if not isinstance(value, str):
        raise _refused(argument, f"must be a str, not {type(value).__name__}", TypeError)
    if token and not value.strip():
        raise _refused(argument, "must not be empty (pass None for no key)")
    if not _CONTROL_CHARACTERS.isdisjoint(value) or (token and any(map(str.isspace, value))):
        space = "whitespace or " if token else ""
        raise _refused(argument, f"contains {space}a control character (CR, LF, ...)")
    if any(ord(c) > (127 if token else 255) for c in value):
        kind = "ASCII" if token else "Latin-1 text (HTTP headers are)"
        raise _refused(argument, f"must be {kind}")
    return value


def _check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """A checked copy (its values _Secret already: _as_secret)."""
    if headers is None:
        return {}
    if not isinstance(headers, collections.abc.Mapping):
        raise TypeError(f"headers must be a mapping of str to str, not {type(headers).__name__}")
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not _TOKEN_CHARACTERS.issuperset(name):
            raise ValueError(f"headers: {name!r} is not a valid header name")
        if name.lower() in ("content-length", "transfer-encoding", "connection"):
            raise ValueError(f"headers: {name} is set by the client itself")
        _check_header_value(value, f"headers[{name!r}]")
    return dict(headers)


def _merge_headers(*layers: Mapping[str, str]) -> dict[str, str]:
    """A later name replaces an earlier one, whatever their case."""
    merged = {name.lower(): (name, value) for layer in layers for name, value in layer.items()}
    return dict(merged.values())


def _check_text(value: str, argument: str) -> None:
    if not isinstance(value, str):
        raise _refused(argument, f"must be a str, not {type(value).__name__}", TypeError)
    if not value.strip():
        raise _refused(argument, "must not be empty")


def _format_dates(start: datetime.date | str, end: datetime.date | str) -> list[str]:
    """The dates as sent: strings as given, dates in ISO 8601 (in order)."""
    for value, argument in ((start, "start_date"), (end, "end_date")):
        if isinstance(value, str):
            _check_text(value, argument)
        elif not isinstance(value, datetime.date):
            kind = f"a datetime.date, datetime.datetime or str, not {type(value).__name__}"
            raise _refused(argument, f"must be {kind}", TypeError)
    if isinstance(start, datetime.date) and isinstance(end, datetime.date):
        # A date and a datetime are compared as days.
        mixed = isinstance(start, datetime.datetime) != isinstance(end, datetime.datetime)
        first = start.date() if mixed and isinstance(start, datetime.datetime) else start
        last = end.date() if mixed and isinstance(end, datetime.datetime) else end
        # Naive and aware datetimes cannot be ordered: the service decides.
        with contextlib.suppress(TypeError):
            if first > last:
                raise _named(
                    ValueError,
                    ("start_date", "start_date"),
                    f" {start.isoformat()} is after ",
                    ("end_date", "end_date"),
                    f" {end.isoformat()}",
                )
    return [d if isinstance(d, str) else d.isoformat() for d in (start, end)]


def _check_sha256(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    if not isinstance(sha256, str):
        raise _refused("sha256", f"must be a hex str, not {type(sha256).__name__}", TypeError)
    digest = sha256.strip().lower()
    if len(digest) != 64 or not set(digest) <= set("0123456789abcdef"):
        raise _refused("sha256", f"must be 64 hexadecimal digits, got {sha256!r}")
    return digest


def _resolve_download_url(base_url: str, download_url: str) -> str:
    """``download_url`` resolved as RFC 3986 says."""
    # Checked before urljoin, which drops CR, LF and tab.
    _check_url_characters(download_url, "download_url")
    parts = _split_http_url(download_url, "download_url", base_url + "/")
    path = _percent_encoded(parts.path)
    query = _percent_encoded(parts.query)
    return urllib.parse.urlunsplit(parts._replace(path=path, query=query))


def _check_destination_path(destination: str | os.PathLike[str]) -> str:
    path = os.fspath(destination)
    if not isinstance(path, str):
        wanted = "must be a str path (or a binary file object), not bytes"
        raise _refused("destination", wanted, TypeError)
    if not path:
        raise _refused("destination", "must not be empty")
    return path


# ============================================================================
# Configuration
# ============================================================================

# tomllib reads the config file whole: a larger one is refused.
_MAX_CONFIG_SIZE = 1024 * 1024
_PROFILE_KEYS = ("base_url", "api_key", "ca_bundle", "timeout")
# A key's names in a config file (lower case, "_" for "-"): its value is a secret.
_KEY_SPELLINGS = frozenset({"api_key", "apikey"})


def _profile_settings(profile: str | None, settings: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """{name: (value, where from)}: ``settings`` (wrapped in place), variables, the profile's."""
    for name in {"api_key", "headers"} & settings.keys():
        settings[name] = _as_secret(settings[name])
    asked = profile or os.environ.get("DATASET_CLIENT_PROFILE")
    path, table = _read_profile(asked)
    where = f"[{asked or 'default'}] in {path}"
    found = {name: (value, where) for name, value in table.items()}
    if os.environ.get("DATASET_CLIENT_BASE_URL"):
        found["base_url"] = (os.environ["DATASET_CLIENT_BASE_URL"], "DATASET_CLIENT_BASE_URL")
    # As _Secret the moment it is read: no frame shows it.
    if os.environ.get("DATASET_CLIENT_API_KEY"):
        found["api_key"] = (_Secret(os.environ["DATASET_CLIENT_API_KEY"]), "DATASET_CLIENT_API_KEY")
    service = settings.get("base_url") or found.get("base_url", ("",))[0]
    own = table.get("base_url") or service
    # The profile's key goes to its base_url's scheme and host[:port] alone.
    elsewhere = urllib.parse.urlsplit(service.lower())[:2] != urllib.parse.urlsplit(own.lower())[:2]
    if service and elsewhere and found.get("api_key", (0, ""))[1] == where:
        found["api_key"] = (None, where)
    return {**found, **{name: (value, "argument") for name, value in settings.items()}}


def _read_profile(asked: str | None) -> tuple[str, dict[str, Any]]:
    """The config file's path and profile ``asked`` (else [default], or {})."""
    path = _config_path()
    try:
        file = _open_config(path)
    except FileNotFoundError:
        if asked:
            no_config = f"no config file {path} for "
            raise _named(LookupError, no_config, ("profile", "profile"), f" {asked}") from None
        if os.environ.get("DATASET_CLIENT_CONFIG"):
            raise LookupError(f"no config file {path}") from None
        return path, {}
    except OSError as exc:
        raise ValueError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    with file:
        status = os.fstat(file.fileno())
        _check_config_file_is_own(path, status)
        config, reason = _parsed_config(file)
    if config is None:
        # Not in the except clause: tomllib's error (the context) keeps frames with the text.
        raise ValueError(f"cannot read the config file {path}: {reason}")
    tables = {name: table for name, table in config.items() if isinstance(table, dict)}
    keys = {key.lower().replace("-", "_") for table in (config, *tables.values()) for key in table}
    # A key readable by others is refused, as ssh refuses such a private key.
    if _HAS_GETEUID and status.st_mode & 0o044 and keys & _KEY_SPELLINGS:
        chmod = f"chmod 600 {_shell_quoted(path)}"
        raise PermissionError(f"{path} holds an api_key and is readable by others: run {chmod}")
    name = asked or "default"
    if name not in tables:
        if not asked:
            return path, {}
        there = ", ".join(tables) or "none"
        raise LookupError(f"no profile {name!r} in {path}; its profiles: {there}")
    return path, _checked_profile(tables[name], f"[{name}] in {path}", path)


def _parsed_config(file: BinaryIO) -> tuple[dict[str, Any] | None, str]:
    """The TOML, its keys as _Secret; else None and why."""
    import tomllib

    try:
        config = tomllib.load(file)
    except (OSError, ValueError, RecursionError) as exc:
        deep = isinstance(exc, RecursionError)
        return None, "nested too deeply" if deep else str(getattr(exc, "strerror", None) or exc)
    # What may be a key (any spelling, unread) is in no frame.
    for table in [config, *(value for value in config.values() if isinstance(value, dict))]:
        for key, value in table.items():
            kept = key in _PROFILE_KEYS and key != "api_key"
            if (table is config and isinstance(value, dict)) or (table is not config and kept):
                continue
            hidden = type(value)() if isinstance(value, (list, dict, int, float)) else None
            table[key] = _Secret(value) if isinstance(value, str) else hidden
    return config, ""


def _config_path() -> str:
    """$DATASET_CLIENT_CONFIG, else dataset-client/config.toml in $XDG_CONFIG_HOME or ~/.config."""
    configured = os.environ.get("DATASET_CLIENT_CONFIG")
    if configured:
        return configured
    base = os.environ.get("XDG_CONFIG_HOME", "")
    base = base if os.path.isabs(base) else os.path.expanduser("~/.config")
    return os.path.join(base, "dataset-client", "config.toml")


def _open_config(path: str) -> BinaryIO:
    # O_NONBLOCK: a FIFO is refused, never waited on.
    return open(path, "rb", opener=lambda name, flags: os.open(name, flags | _O_NONBLOCK))


def _check_config_file_is_own(path: str, status: os.stat_result) -> None:
    # As ssh checks its config: who can write it sets base_url; a FIFO or device would hang.
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"{path} is not a regular file: not used")
    if status.st_size > _MAX_CONFIG_SIZE:
        raise ValueError(f"{path} is larger than {_size(_MAX_CONFIG_SIZE)}: not used")
    quoted = _shell_quoted(path)
    if not _is_mine(status, or_root=True):
        copy = "~/dataset-client.toml"
        raise PermissionError(
            f"{path} is owned by another user (uid {status.st_uid}): not used; a copy of your own"
            f" with mode 600 works: install -m 600 {quoted} {copy}"
            f" and set DATASET_CLIENT_CONFIG={copy}"
        )
    if _HAS_GETEUID and status.st_mode & 0o022:
        said = f"{path} is writable by group or others: not used; run chmod go-w {quoted}"
        raise PermissionError(said)


def _checked_profile(profile: dict[str, Any], where: str, path: str) -> dict[str, Any]:
    """Its known keys, checked; a warning names the others."""
    import warnings

    for key in sorted(set(profile) - set(_PROFILE_KEYS)):
        nearest = min(_PROFILE_KEYS, key=lambda known: _edits(key.lower()[:20], known))
        near = _edits(key.lower()[:20], nearest) <= 2
        guess = f"did you mean {nearest!r}?" if near else f"known keys: {', '.join(_PROFILE_KEYS)}"
        # Said where from_profile (or read_settings) was called.
        warnings.warn(f"unknown key {key!r} in {where} (ignored): {guess}", stacklevel=5)
    profile = {key: value for key, value in profile.items() if key in _PROFILE_KEYS}
    for key, value in profile.items():
        if key == "timeout":
            right = isinstance(value, (int, float)) and not isinstance(value, bool)
            right = right and value >= 0 and _is_finite(value)
        else:
            right = isinstance(value, str) and bool(value)
        if right:
            continue
        kind = "a number of seconds (0: no limit)" if key == "timeout" else "a non-empty string"
        shown = _shortened(repr(value), 40, kept=20)
        # A key is never shown: its kind is, in TOML's words.
        if key == "api_key":
            kinds = {int: "an integer", float: "a float", bool: "a boolean", list: "an array"}
            kinds[dict] = "a table"
            shown = kinds.get(type(value), "an empty string" if value == "" else "a date or time")
        raise ValueError(f"{key} in {where} must be {kind}, not {shown}")
    if "timeout" in profile:
        # A timeout of 0 is no limit.
        profile["timeout"] = profile["timeout"] or None
    if "ca_bundle" in profile:
        home = os.path.dirname(os.path.abspath(path))
        profile["ca_bundle"] = os.path.join(home, os.path.expanduser(profile["ca_bundle"]))
    return profile


def _edits(text: str, other: str) -> int:
    """The Levenshtein distance."""
    row = list(range(len(other) + 1))
    for i, character in enumerate(text, 1):
        above = row
        row = [i]
        for j, wanted in enumerate(other, 1):
            row.append(min(above[j] + 1, row[j - 1] + 1, above[j - 1] + (character != wanted)))
    return row[-1]


def _shell_quoted(text: str) -> str:
    """``text`` as shlex.quote gives it."""
    if text and all(c.isascii() and (c.isalnum() or c in "@%+=:,./-_") for c in text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"


# ============================================================================
# The command line's entry
# ============================================================================


def main(argv: list[str] | None = None) -> int:
    """Run dataset_client_cli.py beside this file (-I leaves it off sys.path), or one installed."""
    # Run as __main__, this module is dataset_client too: compiled once.
    sys.modules.setdefault("dataset_client", sys.modules[__name__])
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dataset_client_cli.py")
    try:
        cli = sys.modules.get("dataset_client_cli") or _command_line(path)
    except ImportError as exc:
        sys.stderr.write(f"dataset-client: error: {exc.msg}\n")
        return 2
    return int(cli.main(argv))


def _command_line(path: str) -> Any:
    """dataset_client_cli from ``path``'s source (a .pyc may be anyone's), else installed."""
    source = _own_source(path)
    if source is None:
        try:
            import dataset_client_cli
        except ModuleNotFoundError as missing:
            if missing.name != "dataset_client_cli":
                raise
            lone = "the command line is dataset_client_cli.py: copy it beside dataset_client.py"
            raise ImportError(f"{lone}, or run pip install . in a checkout") from None
        return dataset_client_cli
    import types

    cli = sys.modules["dataset_client_cli"] = types.ModuleType("dataset_client_cli")
    cli.__file__ = path
    try:
        exec(compile(source, path, "exec", dont_inherit=True), vars(cli))
        version = getattr(cli, "__version__", "unknown")
        if version != __version__:
            raise ImportError(f"it is version {version}, this {__version__}")
    except Exception as exc:
        del sys.modules["dataset_client_cli"]
        raise ImportError(f"{path} does not fit this dataset_client.py: {exc}") from None
    return cli


def _own_source(path: str) -> bytes | None:
    """``path``'s text, one descriptor, if _refusal_to_run allows (none: None)."""
    status = None
    try:
        status = os.lstat(path)
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_BINARY)
    except (FileNotFoundError, NotADirectoryError):
        # None there (or a zip's: ENOTDIR), or gone since lstat (another user's loop).
        return None
    except OSError as exc:
        # A link (ELOOP), or not the user's to read: as lstat found it (or not to be looked at).
        why = exc.strerror or str(exc)
        raise ImportError(
            _refusal_to_run(path, status, why) if status else f"{path} is not run: {why}"
        ) from None
    # A FIFO or a device is opened without waiting, and never read.
    refusal = _refusal_to_run(path, os.fstat(fd))
    if refusal:
        os.close(fd)
        raise ImportError(refusal)
    with open(fd, "rb") as file:
        return file.read()


def _refusal_to_run(path: str, status: os.stat_result, failure: str = "") -> str:
    """Why ``path`` is not run, or "" (others' code would run as yours)."""
    why = failure
    if stat.S_ISLNK(status.st_mode):
        why = "a symbolic link"
    elif not stat.S_ISREG(status.st_mode):
        why = "not a regular file"
    elif not _is_mine(status, or_root=True):
        why = "another user's file"
    elif status.st_nlink > 1:
        why = f"a file with {status.st_nlink} links"
    # Writable by the user's own group: a umask 002 checkout.
    elif _HAS_GETEUID and status.st_mode & (0o002 if status.st_gid == os.getegid() else 0o022):
        why = f"writable by group or others; run chmod go-w {_shell_quoted(path)}"
    return why and f"{path} is not run (owner: uid {status.st_uid}): {why}"


if __name__ == "__main__":
    sys.exit(main())
