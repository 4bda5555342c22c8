"""A synchronous client for the dataset query and export service.

One file, no dependencies beyond the Python 3.11+ standard library: copy
``dataset_client.py`` into your tree (or ``pip install`` it) and import it.

    from dataset_client import DatasetClient

    with DatasetClient("https://data.example.com/api/v1", api_key="...") as client:
        print(client.list_datasets())
        export = client.create_export("daily_bars", symbols=["AAPL", "MSFT"],
                                      start_date="2024-01-01", end_date="2024-03-31")
        client.download(export["download_url"], "bars.parquet", sha256=export["sha256"])

Every error the client raises about a request derives from ``DatasetClientError``
and also from the built-in exception a caller would already catch::

    DatasetClientError
    ├── ServiceError (RuntimeError)          the service answered >= 400, or a 3xx was left
    ├── RequestTimeoutError (TimeoutError)   connecting or waiting for data timed out
    ├── NetworkError (ConnectionError)       refused, reset, closed early, TLS failure
    │   └── IncompleteResponseError          the body was shorter than Content-Length
    ├── InvalidResponseError (ValueError)    a 2xx body that is not JSON, a bad redirect or range
    ├── ChecksumMismatchError (ValueError)   downloaded bytes do not match the given sha256
    └── ClientClosedError (RuntimeError)     the client was used after close()

Bad arguments raise plain ``TypeError``/``ValueError`` before anything is sent. A
download that fails on the file system raises the ``OSError`` itself. The API key
never appears in an exception, a repr or a log record.

Licence: MIT. Copyright (c) 2026 the dataset-client authors.
"""

from __future__ import annotations

import base64
import collections.abc
import contextlib
import datetime
import email.utils
import errno
import functools
import hashlib
import http.client
import json
import os
import random
import re
import select
import shutil
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; annotations are strings at run time
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any, BinaryIO, Protocol, TypeVar

    _T = TypeVar("_T")
    _PoolKey = tuple[str, str, str | None]

    class _Sink(Protocol):
        """Where downloaded bytes go: a temporary file (_AtomicFile) or the caller's (_StreamSink)."""

        def reserve(self, size: int | None) -> None: ...  # before the first byte, with the expected size
        def write(self, data: memoryview) -> None: ...
        def rewind(self) -> None: ...  # forget what was written: the server started over
        def commit(self) -> None: ...  # everything arrived and checked out


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

__version__ = "1.0.0"

_DEFAULT_USER_AGENT = "dataset-client/{} Python/{}.{}.{}".format(__version__, *sys.version_info[:3])
_CHUNK_SIZE = 1024 * 1024  # 1 MiB reads measured faster than 64 KiB ones, and memory stays flat
_MAX_REDIRECTS = 10
_MAX_RETRY_AFTER = 60.0  # a longer Retry-After is not waited for: the error is raised
_MAX_BACKOFF = 30.0
_ERROR_BODY_LIMIT = 64 * 1024  # bytes of an error body kept in ServiceError.body
_MAX_IDLE_PER_ORIGIN = 8
_GC_PAUSE_THRESHOLD = 256 * 1024  # JSON bodies at least this large are decoded with gc paused
_JSON_FIRST_BYTES = frozenset(b' \t\r\n{["-0123456789tfn')  # RFC 8259: what a JSON text starts with
_REDIRECT_STATUSES = frozenset((301, 302, 303, 307, 308))
_RETRY_STATUSES_GET = frozenset((429, 502, 503, 504))
_RETRY_STATUSES_POST = frozenset((429, 503))  # these say the request was not acted on
# Sets, not regular expressions: compiling a pattern at import costs more than the rest of the module.
_TOKEN_CHARACTERS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_CONTROL_CHARACTERS = frozenset(map(chr, (*range(0x09), *range(0x0A, 0x20), 0x7F)))  # tab is allowed in a value


# ---------------------------------------------------------------------------
# Exceptions
# ---------------------------------------------------------------------------


class DatasetClientError(Exception):
    """Base of every error the client raises about a request."""

    #: how many attempts were made before this error was raised
    attempts: int = 1
    _while_connecting = False  # the request never left: safe to retry whatever the method
    _retryable = True

    def __str__(self) -> str:
        text = super().__str__()
        if self.attempts > 1:
            return f"{text} (after {self.attempts} attempts)"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle the fields and the cause too, not only ``args``.
        return (_rebuild_exception, (type(self), self.args, self.__dict__, self.__cause__))


def _rebuild_exception(
    cls: type[DatasetClientError], args: tuple[Any, ...], state: dict[str, Any], cause: BaseException | None
) -> DatasetClientError:
    error = cls(*args)
    error.__dict__.update(state)
    error.__cause__ = cause
    return error


class ServiceError(DatasetClientError, RuntimeError):
    """The service answered with an error status (>= 400, or a 3xx left after redirects).

    ``str()`` reads like ``404 Not Found: GET http://h/api/datasets/x: no such dataset``.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        method: str,
        url: str,
        *,
        headers: http.client.HTTPMessage | None = None,
        body: str = "",
        payload: Any = None,
        message: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, reason, method, url)
        self.status = status
        self.reason = reason
        self.method = method
        self.url = url
        self.headers = headers if headers is not None else http.client.HTTPMessage()
        self.body = body  # the start of the response body, as text
        self.payload = payload  # the body decoded as JSON, or None
        self.message = message  # the service's own message, when its JSON has one
        self.request_id = request_id  # from X-Request-Id, else Request-Id
        self.retry_after = retry_after  # seconds, from Retry-After

    def __str__(self) -> str:
        text = f"{self.status} {self.reason}: {self.method} {self.url}"
        if self.message:
            text = f"{text}: {self.message}"
        if self.attempts > 1:
            text = f"{text} (after {self.attempts} attempts)"
        return text


class RequestTimeoutError(DatasetClientError, TimeoutError):
    """Connecting, or waiting for data, took longer than the client's ``timeout``."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class NetworkError(DatasetClientError, ConnectionError):
    """The connection failed: refused, reset, closed early, or TLS failed."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class IncompleteResponseError(NetworkError):
    """The connection closed before the whole body (``Content-Length``) arrived."""

    def __init__(self, message: str, *, url: str = "", expected: int | None = None, received: int = 0) -> None:
        super().__init__(message, url=url)
        self.expected = expected
        self.received = received


class InvalidResponseError(DatasetClientError, ValueError):
    """A response the client cannot accept: a 2xx body that is not JSON, a bad redirect or range."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class ChecksumMismatchError(DatasetClientError, ValueError):
    """The downloaded bytes do not have the sha256 digest the caller gave."""

    def __init__(self, message: str, *, url: str = "", expected: str = "", actual: str = "") -> None:
        super().__init__(message)
        self.url = url
        self.expected = expected
        self.actual = actual


class ClientClosedError(DatasetClientError, RuntimeError):
    """The client was used after ``close()``."""


# ---------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------


class DatasetClient:
    """A client for one service, holding kept-alive connections until ``close()``.

    ``base_url`` is the service address (``http`` or ``https``, its path prefix kept);
    ``api_key`` is sent as ``Authorization: Bearer <key>`` to that origin only.
    ``timeout`` bounds connecting and each wait for data, in seconds (``None``: no
    limit). ``max_retries`` is how many times a retryable failure is retried.
    ``headers`` are extra headers for every service request (and, like the key, sent
    only to ``base_url``'s origin). ``backoff_factor`` scales the waits between retries
    (``backoff_factor * 2**n`` seconds, with jitter). One client may be shared by threads.
    """

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
        backoff_factor: float = 0.5,
    ) -> None:
        self._base_url, self._origin = _parse_base_url(base_url)
        self._timeout = _check_timeout(timeout)
        self._max_retries = _check_count(max_retries, "max_retries")
        self._backoff_factor = _check_backoff(backoff_factor)
        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise TypeError(f"ssl_context must be an ssl.SSLContext, not {type(ssl_context).__name__}")
        if user_agent is None:
            user_agent = _DEFAULT_USER_AGENT
        _check_header_value(user_agent, "user_agent")
        private = {} if api_key is None else {"Authorization": "Bearer " + _check_api_key(api_key)}
        private = _merge_headers(private, _check_headers(headers))
        # Credentials (the key and the extra headers) go only to base_url's origin.
        public = {"User-Agent": user_agent, "Accept": "application/json", "Accept-Encoding": "gzip"}
        self._service_headers = _merge_headers(public, private)
        public = {"User-Agent": user_agent, "Accept": "*/*", "Accept-Encoding": "identity"}
        self._download_headers = (_merge_headers(public, private), public)
        self._private_names = frozenset(name.lower() for name in private)
        self._pool = _ConnectionPool(ssl_context)
        self._opener = urllib.request.OpenerDirector()
        self._opener.add_handler(_ProxyHandler())  # HTTP(S)_PROXY, NO_PROXY, read now
        self._opener.add_handler(self._pool)
        self._sleep: Callable[[float], None] = time.sleep

    def __repr__(self) -> str:
        return f"<DatasetClient {self._base_url!r}{' (closed)' if self._pool.closed else ''}>"

    def __enter__(self) -> DatasetClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection; the client cannot be used afterwards. Idempotent."""
        self._pool.close()

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
    ) -> Any:
        """``POST /exports``; return the decoded JSON (the export, with its download URL).

        ``symbols`` is one symbol or an iterable of them. Dates are ``datetime.date``,
        ``datetime.datetime`` or strings sent as given. Each call carries a fresh
        ``Idempotency-Key``, kept across its retries.
        """
        import uuid  # only this operation needs it

        _check_text(dataset, "dataset")
        _check_text(format, "format")
        body = {
            "dataset": dataset,
            "symbols": _check_symbols(symbols),
            "start_date": _format_date(start_date, "start_date"),
            "end_date": _format_date(end_date, "end_date"),
            "format": format,
        }
        _check_date_order(start_date, end_date)
        return self._call("POST", "/exports", body, {"Idempotency-Key": str(uuid.uuid4())})

    def download(
        self,
        download_url: str,
        destination: str | os.PathLike[str] | BinaryIO,
        *,
        progress: Callable[[int, int | None], object] | None = None,
        sha256: str | None = None,
    ) -> None:
        """Stream ``download_url`` to ``destination``, a path or a binary file object.

        A relative URL is resolved against ``base_url``. A path is written through a
        temporary file in the same directory, checked, then moved into place: on any
        failure nothing is left and an existing file is untouched. A file object is
        written at its position and left open. ``progress(done, total_or_None)`` is
        called as bytes arrive; ``sha256`` is the hex digest the bytes must have. An
        interrupted transfer is resumed with a Range request when the server allows.
        """
        url = self._resolve_download_url(download_url)
        expected_digest = _check_sha256(sha256)
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be callable, not {type(progress).__name__}")
        self._ensure_open()
        if isinstance(destination, (str, os.PathLike)):
            with _AtomicFile(_check_destination_path(destination)) as sink:
                self._download(url, sink, progress, expected_digest)
        elif _is_writable_binary(destination):
            self._download(url, _StreamSink(destination), progress, expected_digest)
        else:
            raise TypeError(
                f"destination must be a path or a binary file object open for writing, not {type(destination).__name__}"
            )

    # end of public API --------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._pool.closed:
            raise ClientClosedError("the DatasetClient is closed")

    def _call(self, method: str, path: str, payload: Any = None, extra_headers: dict[str, str] | None = None) -> Any:
        """The one request path of the service operations: send, retry, decode."""
        self._ensure_open()
        url = self._base_url + path
        body = None if payload is None else _encode_json(payload)
        headers = self._service_headers if extra_headers is None else {**self._service_headers, **extra_headers}

        def attempt() -> Any:
            response = self._open(method, url, body, headers, trusted=True)
            try:
                return _read_json(response, method)
            finally:
                response.close()

        return self._with_retries(method, url, attempt)

    def _open(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str], *, trusted: bool
    ) -> http.client.HTTPResponse:
        """Send one request, following redirects; return a 2xx response or raise.

        ``trusted`` says whether ``headers`` may carry credentials: they are dropped
        for good as soon as a redirect leaves base_url's origin.
        """
        for hop in range(_MAX_REDIRECTS + 1):
            response = self._send(method, url, body, headers)
            status = response.status
            location = response.headers.get("Location") if status in _REDIRECT_STATUSES else None
            if status < 300:
                return response
            if location is None or hop == _MAX_REDIRECTS:
                raise _service_error(response, method, url, hop == _MAX_REDIRECTS and location is not None)
            _discard_body(response)
            url = _redirect_target(url, location)
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", None  # as browsers, requests and httpx do
            if trusted and _origin_of(url) != self._origin:
                trusted = False
                headers = {k: v for k, v in headers.items() if k.lower() not in self._private_names}
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> http.client.HTTPResponse:
        request = urllib.request.Request(url, body, method=method)
        # Set directly, not through add_header, which would re-case every name; a copy,
        # since ProxyHandler adds Proxy-Authorization to it.
        request.headers = {**headers, "Content-Type": "application/json"} if body else dict(headers)
        try:
            response: http.client.HTTPResponse = self._opener.open(request, timeout=self._timeout)
        except _ConnectFailed as exc:
            raise _transport_error(exc.cause, method, url, connecting=True) from exc.cause
        except (OSError, http.client.HTTPException) as exc:
            raise _transport_error(exc, method, url) from exc
        return response

    def _with_retries(
        self, method: str, url: str, attempt: Callable[[], _T], progress: Callable[[], int] | None = None
    ) -> _T:
        """Run ``attempt`` until it succeeds, fails for good, or retries run out.

        ``progress`` (bytes done) lets a download that made progress start its count of
        retries again, so a long flaky transfer still completes.
        """
        attempts = 0
        retries_left = self._max_retries
        last_progress = 0
        while True:
            attempts += 1
            try:
                return attempt()
            except DatasetClientError as error:
                if progress is not None and progress() > last_progress:
                    last_progress = progress()
                    retries_left = self._max_retries
                delay = self._retry_delay(method, error, attempts) if retries_left > 0 else None
                if delay is None:
                    error.attempts = attempts
                    raise
                retries_left -= 1
                _logger().warning(
                    "retrying %s %s in %.2f s (attempt %d failed: %s)", method, url, delay, attempts, error
                )
                self._sleep(delay)

    def _retry_delay(self, method: str, error: DatasetClientError, attempts: int) -> float | None:
        """Seconds to wait before retrying after ``error``, or None when it is not retried."""
        if isinstance(error, ServiceError):
            if error.status not in (_RETRY_STATUSES_GET if method == "GET" else _RETRY_STATUSES_POST):
                return None
            if error.retry_after is not None:
                return error.retry_after if error.retry_after <= _MAX_RETRY_AFTER else None
        elif isinstance(error, (NetworkError, RequestTimeoutError)):
            if not error._retryable:
                return None
            if method != "GET" and not error._while_connecting:
                return None  # a POST may have been acted on: only a failed connect is safe to repeat
        else:
            return None
        delay = min(_MAX_BACKOFF, self._backoff_factor * 2.0 ** (attempts - 1))
        return delay / 2 + random.uniform(0, delay / 2)  # "equal jitter"

    def _resolve_download_url(self, download_url: str) -> str:
        _check_text(download_url, "download_url")
        _check_url_characters(download_url, "download_url")  # before urljoin, which drops CR, LF and tab
        url = urllib.parse.urljoin(self._base_url + "/", download_url)  # RFC 3986 resolution
        parts = _split_http_url(url, "download_url")
        return urllib.parse.urlunsplit(parts._replace(fragment=""))

    def _download(
        self, url: str, sink: _Sink, progress: Callable[[int, int | None], object] | None, expected_digest: str | None
    ) -> None:
        trusted = _origin_of(url) == self._origin
        headers = self._download_headers[0] if trusted else self._download_headers[1]
        state = _Transfer(want_digest=expected_digest is not None)

        def attempt() -> None:
            request_headers = headers
            if state.done and state.validator:
                request_headers = {**headers, "Range": f"bytes={state.done}-", "If-Range": state.validator}
            response = self._open("GET", url, None, request_headers, trusted=trusted)
            try:
                self._receive(response, url, sink, state, progress, resuming=request_headers is not headers)
            finally:
                response.close()
            if state.total is not None and state.done < state.total:  # a resumed part without a length
                raise IncompleteResponseError(
                    f"GET {url}: got {state.done} of {state.total} bytes",
                    url=url,
                    expected=state.total,
                    received=state.done,
                )

        self._with_retries("GET", url, attempt, progress=lambda: state.done)
        if expected_digest is not None and state.digest is not None:
            actual = state.digest.hexdigest()
            if actual != expected_digest:
                raise ChecksumMismatchError(
                    f"sha256 mismatch for {url}: expected {expected_digest}, got {actual}",
                    url=url,
                    expected=expected_digest,
                    actual=actual,
                )
        sink.commit()

    def _receive(
        self,
        response: http.client.HTTPResponse,
        url: str,
        sink: _Sink,
        state: _Transfer,
        progress: Callable[[int, int | None], object] | None,
        *,
        resuming: bool,
    ) -> None:
        """Write one response's body to ``sink``, appending to a resumed transfer or starting over."""
        length = response.length  # Content-Length of this response, None when absent
        if response.status == 206 and resuming:
            _check_content_range(response, url, state)
        elif response.status == 206 or (response.status != 200 and resuming):
            raise InvalidResponseError(f"GET {url}: unexpected {response.status} {response.reason}", url=url)
        else:  # a 200 (or other 2xx): the whole file, from the first byte
            if state.done:
                sink.rewind()
            state.start(length, response.headers)
            sink.reserve(length)
        buffer = bytearray(_CHUNK_SIZE)
        view = memoryview(buffer)
        received = 0
        if progress is not None:
            progress(state.done, state.total)
        while True:
            try:
                count = response.readinto(buffer)
            except (OSError, http.client.HTTPException) as exc:
                raise _transport_error(exc, "GET", url) from exc
            if not count:
                break
            chunk = view[:count]
            sink.write(chunk)
            if state.digest is not None:
                state.digest.update(chunk)
            received += count
            state.done += count
            if progress is not None:
                progress(state.done, state.total)
        # http.client returns a short body without complaint: check the count ourselves.
        if length is not None and received < length:
            raise IncompleteResponseError(
                f"GET {url}: connection closed after {received} of {length} bytes",
                url=url,
                expected=length,
                received=received,
            )


# ---------------------------------------------------------------------------
# Private helpers: the connection pool
# ---------------------------------------------------------------------------


class _ProxyHandler(urllib.request.ProxyHandler):
    """urllib's ProxyHandler, deciding NO_PROXY once per host.

    urllib reads the proxy URLs once, but rescans os.environ for NO_PROXY on every
    request (``proxy_bypass``): about 50 us each, more than the rest of a request.
    """

    def __init__(self) -> None:
        super().__init__()
        self._bypass: dict[str, bool] = {}

    def proxy_open(self, req: urllib.request.Request, proxy: str, type: str) -> http.client.HTTPResponse | None:
        host = req.host
        bypass = self._bypass.get(host)
        if bypass is None:
            bypass = self._bypass[host] = bool(host) and bool(urllib.request.proxy_bypass(host))
        if bypass:
            return None
        # The rest as in urllib.request.ProxyHandler.proxy_open.
        proxy_type, user, password, hostport = _parse_proxy(proxy)
        if user and password:
            credentials = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
            req.add_header("Proxy-authorization", "Basic " + base64.b64encode(credentials.encode()).decode("ascii"))
        proxy_type = proxy_type or type
        req.set_proxy(urllib.parse.unquote(hostport), proxy_type)
        if proxy_type == type or type == "https":
            return None  # the connection handler takes it from here
        response: http.client.HTTPResponse = self.parent.open(req, timeout=req.timeout)  # e.g. an https proxy
        return response


_parse_proxy: Callable[[str], tuple[str | None, str | None, str | None, str]]
_parse_proxy = urllib.request._parse_proxy  # type: ignore[attr-defined]


class _ConnectFailed(Exception):
    """Raised by the pool when a new connection (TCP, proxy tunnel or TLS) fails."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(cause)
        self.cause = cause


class _PooledResponse(http.client.HTTPResponse):
    """An HTTPResponse that gives its connection back to the pool when closed."""

    _release: Callable[[bool], None] | None = None
    _reusable = True

    def close(self) -> None:
        # http.client drops ``fp`` once the body has been read to its end; a body
        # left unread would be taken as the next response, so such a connection goes.
        complete = self.fp is None
        super().close()
        release, self._release = self._release, None
        if release is not None:
            release(complete and self._reusable and not self.will_close)


class _ConnectionPool(urllib.request.BaseHandler):
    """A urllib handler that keeps HTTP/1.1 connections alive and reuses them.

    Stock urllib sends ``Connection: close`` and connects anew for every request.
    Connections here are kept per (scheme, host or proxy, tunnelled host), reused
    only once their response was read to the end, checked for a server-side close
    before reuse, and closed by ``close()``. Safe to share between threads.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None) -> None:
        self._ssl_context = ssl_context
        self._idle: dict[_PoolKey, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self.closed = False

    def http_open(self, request: urllib.request.Request) -> http.client.HTTPResponse:
        return self._open(request, secure=False)

    def https_open(self, request: urllib.request.Request) -> http.client.HTTPResponse:
        return self._open(request, secure=True)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def _open(self, request: urllib.request.Request, *, secure: bool) -> _PooledResponse:
        tunnel_host: str | None = getattr(request, "_tunnel_host", None)
        key = (request.type, request.host, tunnel_host)
        headers = request.headers
        # ProxyHandler adds this for a proxy URL with user:password; through a CONNECT
        # tunnel it belongs to the CONNECT request only, never to the origin.
        proxy_authorization = headers.pop("Proxy-authorization", None)
        if proxy_authorization and not tunnel_host:
            headers["Proxy-Authorization"] = proxy_authorization
        method = request.get_method()
        for _ in range(2):
            connection, reused = self._acquire(key, request, secure, proxy_authorization)
            try:
                connection.request(method, request.selector, request.data, headers)
                response = connection.getresponse()
            except (ConnectionError, http.client.BadStatusLine) as exc:
                connection.close()
                # A kept-alive connection the server closed just as we reused it: no
                # response byte arrived, so an idempotent request is safe to send again.
                if reused and method == "GET" and not isinstance(exc, http.client.LineTooLong):
                    continue
                raise
            except BaseException:
                connection.close()
                raise
            assert isinstance(response, _PooledResponse)
            if response.status < 200:
                response = self._skip_informational(connection, response, method)
            response._release = functools.partial(self._release, key, connection)
            response.url = request.full_url  # as urllib sets it
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _skip_informational(
        self, connection: http.client.HTTPConnection, response: _PooledResponse, method: str
    ) -> _PooledResponse:
        """Skip 1xx responses (http.client itself skips only 100 Continue)."""
        for _ in range(16):
            if response.status >= 200:
                return response
            if response.status == 101 or connection.sock is None:
                connection.close()
                raise http.client.BadStatusLine(f"unexpected {response.status} {response.reason}")
            # The next response may already sit in this response's read buffer: keep it.
            reader, response.fp = response.fp, None  # type: ignore[assignment]  # as http.client does
            response.close()
            response = _PooledResponse(connection.sock, method=method)
            response.fp.close()
            response.fp = reader
            response._reusable = False  # http.client's own state no longer matches the socket
            try:
                response.begin()
            except BaseException:
                connection.close()
                raise
        connection.close()
        raise http.client.BadStatusLine("too many informational responses")

    def _acquire(
        self,
        key: _PoolKey,
        request: urllib.request.Request,
        secure: bool,
        proxy_authorization: str | None,
    ) -> tuple[http.client.HTTPConnection, bool]:
        """Return an idle connection still open, else a new connected one; and whether it was reused."""
        with self._lock:
            if self.closed:
                raise ClientClosedError("the DatasetClient is closed")
            idle = self._idle.get(key)
            while idle:
                candidate = idle.pop()
                if _is_still_open(candidate):
                    return candidate, True
                candidate.close()
            if secure and self._ssl_context is None:
                # Built once, lazily: loading the CA store costs milliseconds.
                self._ssl_context = ssl.create_default_context()
        if secure:
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                request.host, timeout=request.timeout, context=self._ssl_context
            )
        else:
            connection = http.client.HTTPConnection(request.host, timeout=request.timeout)
        connection.response_class = _PooledResponse
        try:
            if key[2]:
                tunnel_headers = {"Proxy-Authorization": proxy_authorization} if proxy_authorization else None
                connection.set_tunnel(key[2], headers=tunnel_headers)
            connection.connect()  # TCP (with TCP_NODELAY), CONNECT tunnel, TLS handshake
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise _ConnectFailed(exc) from exc
        return connection, False

    def _release(self, key: _PoolKey, connection: http.client.HTTPConnection, reusable: bool) -> None:
        if reusable and connection.sock is not None:
            with self._lock:
                idle = self._idle.setdefault(key, [])
                if not self.closed and len(idle) < _MAX_IDLE_PER_ORIGIN:
                    idle.append(connection)
                    return
        connection.close()


def _is_still_open(connection: http.client.HTTPConnection) -> bool:
    """True when an idle connection has nothing to read: a readable one was closed by the server."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return not poller.poll(0)
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------------
# Private helpers: responses and errors
# ---------------------------------------------------------------------------


def _transport_error(exc: BaseException, method: str, url: str, *, connecting: bool = False) -> DatasetClientError:
    """The public exception for a socket, TLS or HTTP protocol failure."""
    error: NetworkError | RequestTimeoutError
    if isinstance(exc, TimeoutError):
        where = "connecting" if connecting else "waiting for data"
        error = RequestTimeoutError(f"{method} {url}: timed out {where}", url=url)
    elif isinstance(exc, http.client.IncompleteRead):
        received = len(exc.partial)
        expected = None if exc.expected is None else received + exc.expected
        error = IncompleteResponseError(
            f"{method} {url}: connection closed after {received} of {expected if expected is not None else '?'} bytes",
            url=url,
            expected=expected,
            received=received,
        )
    elif isinstance(exc, ssl.SSLCertVerificationError):
        error = NetworkError(f"{method} {url}: TLS certificate verification failed: {exc.verify_message}", url=url)
        error._retryable = False
    else:
        detail = str(exc) or type(exc).__name__
        what = "could not connect" if connecting else "connection lost"
        error = NetworkError(f"{method} {url}: {what}: {detail}", url=url)
    error._while_connecting = connecting
    return error


def _read_json(response: http.client.HTTPResponse, method: str) -> Any:
    url: str = response.url
    try:
        data = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise _transport_error(exc, method, url) from exc
    if data and data[0] not in _JSON_FIRST_BYTES:  # gzip (0x1f) and zlib ("x") bodies never start like JSON
        data = _decode_content(data, response.headers.get("Content-Encoding"), url)
    if not data or data.isspace():
        return None
    try:
        if len(data) < _GC_PAUSE_THRESHOLD:
            return json.loads(data)
        return _loads_with_gc_paused(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        content_type = response.headers.get("Content-Type", "no content type")
        raise InvalidResponseError(
            f"{method} {url}: {response.status} response is not JSON ({content_type}): {data[:200]!r}", url=url
        ) from exc


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


def _loads_with_gc_paused(data: bytes) -> Any:
    """json.loads with the cyclic collector paused: it otherwise runs many times over a large result.

    A process-wide count makes concurrent decodes safe: the first one in pauses the
    collector, the last one out restores the state the first one found.
    """
    global _gc_pauses, _gc_was_enabled
    import gc  # only large results come here

    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        return json.loads(data)
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def _decode_content(data: bytes, encoding: str | None, url: str) -> bytes:
    """Undo a gzip (or deflate) Content-Encoding."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return data
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise InvalidResponseError(f"{url}: unsupported Content-Encoding {encoding!r}", url=url)
    try:
        if encoding == "deflate":
            try:
                return zlib.decompress(data)
            except zlib.error:
                return zlib.decompress(data, -zlib.MAX_WBITS)  # raw deflate, as some servers send
        parts = []
        while data:  # a gzip body may hold several members
            decompressor = zlib.decompressobj(wbits=31)
            parts.append(decompressor.decompress(data))
            if not decompressor.eof:
                raise zlib.error("truncated gzip data")
            data = decompressor.unused_data
        return b"".join(parts)
    except zlib.error as exc:
        raise InvalidResponseError(f"{url}: cannot decode the {encoding} body: {exc}", url=url) from exc


def _service_error(response: http.client.HTTPResponse, method: str, url: str, too_many_redirects: bool) -> ServiceError:
    """Read (a bounded part of) an error response and build its ServiceError."""
    try:
        raw = response.read(_ERROR_BODY_LIMIT)
    except (OSError, http.client.HTTPException):
        raw = b""
    finally:
        response.close()
    with contextlib.suppress(InvalidResponseError):  # keep the raw bytes then
        raw = _decode_content(raw, response.headers.get("Content-Encoding"), url)
    charset = response.headers.get_content_charset() or "utf-8"
    try:
        body = raw[:_ERROR_BODY_LIMIT].decode(charset, errors="replace")
    except LookupError:
        body = raw[:_ERROR_BODY_LIMIT].decode("utf-8", errors="replace")
    try:
        payload = json.loads(body) if body.strip() else None
    except ValueError:
        payload = None
    message = f"stopped after {_MAX_REDIRECTS} redirects" if too_many_redirects else _message_of(payload)
    status = response.status
    return ServiceError(
        status,
        response.reason or _standard_reason(status),
        method,
        url,
        headers=response.headers,
        body=body,
        payload=payload,
        message=message,
        request_id=response.headers.get("X-Request-Id") or response.headers.get("Request-Id"),
        retry_after=_parse_retry_after(response.headers.get("Retry-After")),
    )


def _message_of(payload: Any) -> str | None:
    """The service's own message in a JSON error body, under the names services use."""
    if not isinstance(payload, dict):
        return None
    for name in ("message", "error", "detail", "error_description", "title"):
        value = payload.get(name)
        if isinstance(value, dict):
            value = value.get("message")
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _standard_reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header: delay-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


def _discard_body(response: http.client.HTTPResponse) -> None:
    """Read a small body so its connection can be reused; a large one closes it."""
    try:
        response.read(_ERROR_BODY_LIMIT)
    except (OSError, http.client.HTTPException):
        pass
    finally:
        response.close()


def _redirect_target(url: str, location: str) -> str:
    """The absolute URL a redirect points to; only http and https are followed."""
    # urllib quotes the same way: a Location may carry spaces or non-ASCII characters.
    target = urllib.parse.urljoin(url, location.strip())
    target = urllib.parse.quote(target, safe="!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", encoding="iso-8859-1")
    parts = urllib.parse.urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidResponseError(f"{url}: refusing to follow a redirect to {parts.scheme}: URL", url=url)
    return urllib.parse.urlunsplit(parts._replace(fragment=""))


def _origin_of(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    default_port = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default_port


def _check_content_range(response: http.client.HTTPResponse, url: str, state: _Transfer) -> None:
    """A resumed transfer appends only when the 206 starts exactly where we stopped (RFC 9110 14.4)."""
    value = response.headers.get("Content-Range", "")
    match = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", value)
    if (
        match is None
        or int(match[1]) != state.done
        or (state.total is not None and match[3] != "*" and int(match[3]) != state.total)
    ):
        raise InvalidResponseError(
            f"GET {url}: asked to resume at byte {state.done}, got Content-Range {value!r}", url=url
        )


def _logger() -> Any:
    import logging  # only retries log: keep it off the import path

    logger = logging.getLogger("dataset_client")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


# ---------------------------------------------------------------------------
# Private helpers: downloads
# ---------------------------------------------------------------------------


class _Transfer:
    """What a download has received so far, kept across retries."""

    def __init__(self, *, want_digest: bool) -> None:
        self.want_digest = want_digest
        self.done = 0
        self.total: int | None = None
        self.validator: str | None = None  # for If-Range: a strong ETag, else Last-Modified
        self.digest: Any = hashlib.sha256() if want_digest else None

    def start(self, total: int | None, headers: http.client.HTTPMessage) -> None:
        self.done = 0
        self.total = total
        etag = headers.get("ETag")
        self.validator = etag if etag and not etag.startswith("W/") else headers.get("Last-Modified")
        self.digest = hashlib.sha256() if self.want_digest else None


class _AtomicFile:
    """A unique temporary file beside the destination, moved over it by ``commit``."""

    def __init__(self, destination: str) -> None:
        self.destination = destination
        self.directory = os.path.dirname(os.path.abspath(destination))
        self.path = ""
        self.file: Any = None

    def __enter__(self) -> _AtomicFile:
        base = os.path.basename(self.destination)
        for _ in range(100):
            path = os.path.join(self.directory, f".{base}.{os.urandom(6).hex()}.part")
            try:  # O_EXCL: two downloads to one path never share a temporary file
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
            except FileExistsError:
                continue
            self.path = path
            self.file = open(fd, "wb", buffering=0)
            return self
        raise FileExistsError(f"cannot create a temporary file in {self.directory}")

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if self.file is not None:  # not committed: a failure, Ctrl-C included
            self.file.close()
            self.file = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def reserve(self, size: int | None) -> None:
        if size is not None:
            free = shutil.disk_usage(self.directory).free
            if size > free:
                raise OSError(
                    errno.ENOSPC,
                    f"not enough space for {size} bytes ({free} free) in {self.directory}",
                    self.destination,
                )

    def write(self, data: memoryview) -> None:
        self.file.write(data)  # a raw FileIO writes everything on a blocking regular file

    def rewind(self) -> None:
        self.file.seek(0)
        self.file.truncate()

    def commit(self) -> None:
        # Flushed to the operating system (a raw FileIO holds nothing back), not fsync'ed:
        # like curl and wget; a sync halves the speed. See "Decisions" in the README.
        self.file.flush()
        self.file.close()
        self.file = None
        os.replace(self.path, self.destination)


class _StreamSink:
    """A binary file object of the caller's, written at its position and left open."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        try:
            self.start = stream.tell() if stream.seekable() else None
        except OSError:
            self.start = None

    def reserve(self, size: int | None) -> None:
        pass  # the caller's file: its space is the caller's business

    def write(self, data: memoryview) -> None:
        # A copy: the view is of a buffer the next read overwrites, and a stream may keep it.
        remaining = memoryview(bytes(data))
        while remaining:
            written = self.stream.write(remaining)
            if written is None or written >= len(remaining):  # buffered streams write everything
                return
            remaining = remaining[written:]

    def rewind(self) -> None:
        if self.start is None:
            raise InvalidResponseError("the server restarted the transfer and the destination cannot seek back")
        self.stream.seek(self.start)
        self.stream.truncate()

    def commit(self) -> None:
        self.stream.flush()


def _is_writable_binary(destination: object) -> bool:
    if not callable(getattr(destination, "write", None)):
        return False
    import io

    if isinstance(destination, io.TextIOBase):
        return False
    writable = getattr(destination, "writable", None)
    return not callable(writable) or bool(writable())


# ---------------------------------------------------------------------------
# Private helpers: checking arguments (before anything is sent)
# ---------------------------------------------------------------------------


def _parse_base_url(base_url: str) -> tuple[str, tuple[str, str, int]]:
    """Return base_url without a trailing slash, and its origin."""
    if not isinstance(base_url, str):
        raise TypeError(f"base_url must be a str, not {type(base_url).__name__}")
    parts = _split_http_url(base_url, "base_url")
    if parts.query or parts.fragment or base_url.endswith(("?", "#")):
        raise ValueError(f"base_url must not have a query or fragment: {base_url!r}")
    url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return url, _origin_of(url)


def _check_url_characters(url: str, argument: str) -> None:
    # urlsplit silently removes CR, LF and tab (bpo-43882): refuse them, and spaces, first.
    if not url or not _CONTROL_CHARACTERS.isdisjoint(url) or any(c.isspace() for c in url):
        raise ValueError(f"{argument} must be a URL without whitespace or control characters, got {url!r}")


def _split_http_url(url: str, argument: str) -> urllib.parse.SplitResult:
    """Split an http(s) URL with a host and no user:password, or raise ValueError naming ``argument``."""
    _check_url_characters(url, argument)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{argument} must be an http:// or https:// URL, not {parts.scheme or 'no scheme'!r}")
    if "@" in parts.netloc:
        raise ValueError(f"{argument} must not contain a user:password part (pass api_key or headers instead)")
    if not parts.hostname:
        raise ValueError(f"{argument} has no host: {url!r}")
    try:
        parts.port  # noqa: B018 -- the property validates the port
    except ValueError as exc:
        raise ValueError(f"{argument} has an invalid port: {exc}") from None
    return parts._replace(scheme=parts.scheme.lower())


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if not 0 < timeout < float("inf"):  # also rejects NaN
        raise ValueError(f"timeout must be a positive number of seconds (or None for no limit), got {timeout!r}")
    return float(timeout)


def _check_count(value: int, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{argument} must be 0 or more, got {value}")
    return value


def _check_backoff(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"backoff_factor must be a number, not {type(value).__name__}")
    if not 0 <= value < float("inf"):
        raise ValueError(f"backoff_factor must be 0 or more, got {value!r}")
    return float(value)


def _check_api_key(api_key: str) -> str:
    # Never show the key itself in a message.
    if not isinstance(api_key, str):
        raise TypeError(f"api_key must be a str or None, not {type(api_key).__name__}")
    if not api_key.strip():
        raise ValueError("api_key must not be empty (pass None for no key)")
    if not _CONTROL_CHARACTERS.isdisjoint(api_key) or "\t" in api_key or api_key != api_key.strip():
        raise ValueError("api_key contains whitespace or a control character (CR, LF, ...)")
    if not api_key.isascii():
        raise ValueError("api_key must be ASCII")
    return api_key


def _check_header_value(value: str, argument: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a str, not {type(value).__name__}")
    if not _CONTROL_CHARACTERS.isdisjoint(value):
        raise ValueError(f"{argument} contains a control character (CR, LF, ...)")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise ValueError(f"{argument} must be Latin-1 text (HTTP headers are)") from None


def _check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, collections.abc.Mapping):
        raise TypeError(f"headers must be a mapping of str to str, not {type(headers).__name__}")
    checked = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not _TOKEN_CHARACTERS.issuperset(name):
            raise ValueError(f"headers: {name!r} is not a valid header name")
        if name.lower() in ("content-length", "transfer-encoding", "connection"):
            raise ValueError(f"headers: {name} is set by the client itself")
        _check_header_value(value, f"headers[{name!r}]")
        checked[name] = value
    return checked


def _merge_headers(*layers: dict[str, str]) -> dict[str, str]:
    """Merge header dicts, later names replacing earlier ones whatever their case."""
    merged: dict[str, str] = {}
    for layer in layers:
        for name, value in layer.items():
            for existing in [key for key in merged if key.lower() == name.lower()]:
                del merged[existing]
            merged[name] = value
    return merged


def _check_text(value: str, argument: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{argument} must not be empty")


def _check_symbols(symbols: str | Iterable[str]) -> list[str]:
    if isinstance(symbols, str):
        symbols = [symbols]
    elif isinstance(symbols, (bytes, bytearray, collections.abc.Mapping)) or not isinstance(
        symbols, collections.abc.Iterable
    ):
        raise TypeError(f"symbols must be a str or an iterable of str, not {type(symbols).__name__}")
    checked = list(symbols)
    for symbol in checked:
        if not isinstance(symbol, str):
            raise TypeError(f"symbols must contain only str, found {type(symbol).__name__}")
        if not symbol.strip():
            raise ValueError("symbols must not contain an empty string")
    if not checked:
        raise ValueError("symbols must not be empty")
    return checked


def _format_date(value: datetime.date | str, argument: str) -> str:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()  # YYYY-MM-DD
    if isinstance(value, str):
        _check_text(value, argument)
        return value
    raise TypeError(f"{argument} must be a datetime.date, datetime.datetime or str, not {type(value).__name__}")


def _check_date_order(start: datetime.date | str, end: datetime.date | str) -> None:
    if not isinstance(start, datetime.date) or not isinstance(end, datetime.date):
        return  # strings are the service's to judge
    if isinstance(start, datetime.datetime) != isinstance(end, datetime.datetime):
        # one date and one datetime: compare the calendar days
        start_day = start.date() if isinstance(start, datetime.datetime) else start
        end_day = end.date() if isinstance(end, datetime.datetime) else end
        after = start_day > end_day
    else:
        try:
            after = start > end
        except TypeError:  # naive and aware datetimes cannot be ordered
            return
    if after:
        raise ValueError(f"start_date {start.isoformat()} is after end_date {end.isoformat()}")


def _encode_json(payload: Any) -> bytes:
    try:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the request contains text that is not valid Unicode (a lone surrogate)") from None


def _check_sha256(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    if not isinstance(sha256, str):
        raise TypeError(f"sha256 must be a hex str, not {type(sha256).__name__}")
    digest = sha256.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ValueError(f"sha256 must be 64 hexadecimal digits, got {sha256!r}")
    return digest


def _check_destination_path(destination: str | os.PathLike[str]) -> str:
    path = os.fspath(destination)
    if not isinstance(path, str):
        raise TypeError("destination must be a str path (or a binary file object), not bytes")
    if not path:
        raise ValueError("destination must not be empty")
    if os.path.isdir(path):
        raise ValueError(f"destination is a directory: {path!r}")
    return path


# ---------------------------------------------------------------------------
# The command line: python -m dataset_client --help
# ---------------------------------------------------------------------------

_EXIT_OK, _EXIT_SERVICE_ERROR, _EXIT_USAGE, _EXIT_NETWORK_ERROR = 0, 1, 2, 3


def main(argv: list[str] | None = None) -> int:
    """Run the ``dataset-client`` command; return its exit status.

    JSON goes to stdout, one-line errors to stderr. Exit status: 0 ok, 1 service
    error (or a failed download), 2 usage error, 3 network error. The key comes from
    ``$DATASET_CLIENT_API_KEY`` only, never from the command line, where ``ps`` shows it.
    """
    import argparse  # the command line's imports stay off the library's import path

    parser = argparse.ArgumentParser(
        prog="dataset-client",
        description="Query the dataset service, create exports and download them.",
        epilog="The API key is read from $DATASET_CLIENT_API_KEY (never from the command line).",
    )
    parser.add_argument(
        "--base-url",
        default=os.environ.get("DATASET_CLIENT_BASE_URL"),
        help="service address (default: $DATASET_CLIENT_BASE_URL)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each connect or read")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("datasets", help="list the datasets", description="List the datasets (JSON on stdout).")
    query = commands.add_parser("query", help="run an SQL query", description="Run SQL; print the result as JSON.")
    query.add_argument("sql", help="the SQL text, or - to read it from stdin")

    def date(text: str) -> datetime.date:  # argparse names it in "invalid date value"
        try:
            return datetime.date.fromisoformat(text)
        except ValueError:
            return datetime.datetime.fromisoformat(text)

    export = commands.add_parser("export", help="create an export", description="Create an export; print it as JSON.")
    export.add_argument("dataset")
    export.add_argument("--symbols", required=True, help="comma-separated, e.g. AAPL,MSFT")
    export.add_argument("--start", required=True, type=date, help="first date, YYYY-MM-DD")
    export.add_argument("--end", required=True, type=date, help="last date, YYYY-MM-DD")
    export.add_argument("--format", default="parquet", help="file format (default: parquet)")
    download = commands.add_parser(
        "download", help="download a file", description="Download a file (an export's download_url) to DEST."
    )
    download.add_argument("url", help="the URL, absolute or relative to the base URL")
    download.add_argument("destination", metavar="DEST", help="the file to write, or - for stdout")
    download.add_argument("--sha256", help="the hex digest the file must have")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit:  # --help, --version, or a usage error (argparse printed it)
        return exit.code if isinstance(exit.code, int) else _EXIT_USAGE

    def fail(status: int, message: str) -> int:
        print(f"dataset-client: error: {' '.join(message.split())}", file=sys.stderr)
        return status

    if not args.base_url:
        return fail(_EXIT_USAGE, "no service address: pass --base-url or set DATASET_CLIENT_BASE_URL")
    try:
        client = DatasetClient(args.base_url, os.environ.get("DATASET_CLIENT_API_KEY") or None, timeout=args.timeout)
    except (TypeError, ValueError) as exc:
        return fail(_EXIT_USAGE, str(exc))
    try:
        with client:
            if args.command == "download":
                _cli_download(client, args.url, args.destination, args.sha256)
                return _EXIT_OK
            if args.command == "datasets":
                result = client.list_datasets()
            elif args.command == "query":
                result = client.query(sys.stdin.read() if args.sql == "-" else args.sql)
            else:
                symbols = [symbol.strip() for symbol in args.symbols.split(",") if symbol.strip()]
                result = client.create_export(
                    args.dataset, symbols=symbols, start_date=args.start, end_date=args.end, format=args.format
                )
            sys.stdout.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
            sys.stdout.flush()
            return _EXIT_OK
    except (NetworkError, RequestTimeoutError) as exc:
        return fail(_EXIT_NETWORK_ERROR, str(exc))
    except DatasetClientError as exc:
        return fail(_EXIT_SERVICE_ERROR, str(exc))
    except (TypeError, ValueError) as exc:  # arguments the client refused before sending
        return fail(_EXIT_USAGE, str(exc))
    except BrokenPipeError:  # stdout closed early, as by `| head`
        sys.stderr.close()
        return _EXIT_OK
    except OSError as exc:
        return fail(_EXIT_SERVICE_ERROR, f"cannot write {args.destination}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        return fail(130, "interrupted")


def _cli_download(client: DatasetClient, url: str, destination: str, sha256: str | None) -> None:
    """Download with a progress bar on a terminal, else a one-line summary; both on stderr."""
    started = time.monotonic()
    shown = {"at": 0.0, "done": 0}
    terminal = sys.stderr.isatty()

    def progress(done: int, total: int | None) -> None:
        shown["done"] = done
        now = time.monotonic()
        if terminal and (now - shown["at"] >= 0.2 or done == total):  # redraw at most 5 times a second
            shown["at"] = now
            sys.stderr.write("\r" + _progress_line(done, total, now - started) + "\033[K")
            sys.stderr.flush()

    if destination == "-":
        client.download(url, sys.stdout.buffer, progress=progress, sha256=sha256)
        sys.stdout.buffer.flush()
    else:
        client.download(url, destination, progress=progress, sha256=sha256)
    elapsed = time.monotonic() - started
    if terminal:
        sys.stderr.write("\n")
    rate = _size(shown["done"] / elapsed) + "/s" if elapsed > 0 else ""
    where = "stdout" if destination == "-" else destination
    print(f"downloaded {_size(shown['done'])} to {where} in {elapsed:.1f} s ({rate})", file=sys.stderr)


def _progress_line(done: int, total: int | None, elapsed: float) -> str:
    rate = done / elapsed if elapsed > 0 else 0.0
    if total:
        left = f"{(total - done) / rate:.0f} s left" if rate else ""
        bar = "#" * int(30 * done / total)
        return f"[{bar:<30}] {done * 100 // total:3d}% {_size(done)} of {_size(total)}  {_size(rate)}/s  {left}"
    return f"{_size(done)}  {_size(rate)}/s"


def _size(count: float) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    index = 0
    while count >= 1024 and index < len(units) - 1:
        count /= 1024
        index += 1
    return f"{count:.0f} B" if index == 0 else f"{count:.1f} {units[index]}"


if __name__ == "__main__":
    sys.exit(main())
