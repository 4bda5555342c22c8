"""One measurement, in a fresh process, printed as JSON. Driven by benchmarks/run.py.

    worker.py import VARIANT
    worker.py construct VARIANT COUNT
    worker.py requests VARIANT URL METHOD COUNT CAFILE
    worker.py bigjson VARIANT URL CAFILE
    worker.py download VARIANT URL DESTINATION CAFILE SHA256 CONNECTIONS

It runs under the benchmark's throwaway virtual environment (requests, httpx), with
the repository on sys.path for dataset_client (or $DATASET_CLIENT_FROM, the previous
release). Times are wall (perf_counter) and CPU (process time, or the children's for
curl and openssl); memory is the peak RSS (VmHWM).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(
    0,
    os.environ.get("DATASET_CLIENT_FROM")
    or os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
)
HEADERS = {"User-Agent": "bench/1", "Accept": "application/json", "Accept-Encoding": "gzip"}
QUERY = {"sql": "SELECT 1"}
CHUNK = 1024 * 1024


def peak_rss_mib() -> float:
    """This process's peak RSS. Not ru_maxrss: on Linux it survives exec, so it reports
    the forking parent's size."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


def tls_context(cafile: str) -> Any:
    import ssl

    return ssl.create_default_context(cafile=cafile) if cafile != "-" else None


def measure_import(variant: str) -> dict[str, float]:
    started = time.perf_counter()
    if variant == "json+urllib.request":
        import json as _  # noqa: F401
        import urllib.request  # noqa: F401
    elif variant == "dataset_client":
        import dataset_client  # noqa: F401
    elif variant == "requests":
        import requests  # noqa: F401
    elif variant == "httpx":
        import httpx  # noqa: F401
    else:
        raise SystemExit(f"unknown variant {variant}")
    return {"seconds": time.perf_counter() - started}


def measure_construct(variant: str, count: int) -> dict[str, float]:
    import urllib.request

    import dataset_client

    make: Callable[[], Any]
    if variant == "dataset_client":

        def make() -> None:
            dataset_client.DatasetClient("https://127.0.0.1:1/api").close()
    elif variant == "urllib":

        def make() -> None:
            urllib.request.build_opener()
    elif variant == "requests":
        import requests

        def make() -> None:
            requests.Session().close()
    elif variant == "httpx":
        import httpx

        def make() -> None:
            httpx.Client().close()
    else:
        raise SystemExit(f"unknown variant {variant}")
    make()
    started = time.perf_counter()
    for _ in range(count):
        make()
    return {"seconds": (time.perf_counter() - started) / count}


def request_loop(
    variant: str, url: str, method: str, cafile: str
) -> tuple[Callable[[], Any], Callable[[], None]]:
    """Return (one request, decoded; close). Every variant keeps its connection alive but stock urllib."""
    loops = {
        "dataset_client": dataset_client_loop,
        "http.client": http_client_loop,
        "http.client-no-timeout": http_client_loop,
        "urllib": urllib_loop,
        "requests": requests_loop,
        "httpx": httpx_loop,
    }
    if variant not in loops:
        raise SystemExit(f"unknown variant {variant}")
    return loops[variant](variant, url, method, cafile)


def dataset_client_loop(
    variant: str, url: str, method: str, cafile: str
) -> tuple[Callable[[], Any], Callable[[], None]]:
    import dataset_client

    client = dataset_client.DatasetClient(
        url.rsplit("/", 1)[0], "key", ssl_context=tls_context(cafile)
    )
    if url.endswith("/datasets"):
        return client.list_datasets, client.close
    return (lambda: client.query("SELECT 1")), client.close


def http_client_loop(
    variant: str, url: str, method: str, cafile: str
) -> tuple[Callable[[], Any], Callable[[], None]]:
    import http.client
    import urllib.parse

    # With a timeout (as dataset_client always has, 30 s by default), CPython polls
    # before each send and receive; a blocking socket does not.
    timeout = None if variant == "http.client-no-timeout" else 30.0
    parts = urllib.parse.urlsplit(url)
    connection = (
        http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=tls_context(cafile)
        )
        if parts.scheme == "https"
        else http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    )
    headers = {**HEADERS, "Authorization": "Bearer key"}
    post_headers = {**headers, "Content-Type": "application/json"}

    def raw() -> Any:
        if method == "GET":
            connection.request("GET", parts.path, headers=headers)
        else:  # encoded per request, as every client does
            connection.request("POST", parts.path, json.dumps(QUERY).encode(), post_headers)
        return json.loads(connection.getresponse().read())

    return raw, connection.close


def urllib_loop(
    variant: str, url: str, method: str, cafile: str
) -> tuple[Callable[[], Any], Callable[[], None]]:
    import urllib.request

    context = tls_context(cafile)
    body = json.dumps(QUERY).encode()

    def stock() -> Any:
        request = urllib.request.Request(
            url, body if method == "POST" else None, {**HEADERS, "Authorization": "Bearer key"}
        )
        if method == "POST":
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, context=context) as response:
            return json.loads(response.read())

    return stock, lambda: None


def requests_loop(
    variant: str, url: str, method: str, cafile: str
) -> tuple[Callable[[], Any], Callable[[], None]]:
    import requests

    session = requests.Session()
    session.headers["Authorization"] = "Bearer key"
    verify: Any = cafile if cafile != "-" else True
    if method == "GET":
        return (lambda: session.get(url, verify=verify).json()), session.close
    return (lambda: session.post(url, json=QUERY, verify=verify).json()), session.close


def httpx_loop(
    variant: str, url: str, method: str, cafile: str
) -> tuple[Callable[[], Any], Callable[[], None]]:
    import httpx

    context = tls_context(cafile)
    client = httpx.Client(
        verify=context if context is not None else True, headers={"Authorization": "Bearer key"}
    )
    if method == "GET":
        return (lambda: client.get(url).json()), client.close
    return (lambda: client.post(url, json=QUERY).json()), client.close


def measure_requests(
    variant: str, url: str, method: str, count: int, cafile: str
) -> dict[str, float]:
    call, close = request_loop(variant, url, method, cafile)
    for _ in range(min(20, count)):  # warm up: connect, TLS, caches
        call()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        call()
    result = {
        "wall": (time.perf_counter() - wall) / count,
        "cpu": (time.process_time() - cpu) / count,
    }
    close()
    return result


def measure_bigjson(variant: str, url: str, cafile: str) -> dict[str, float]:
    """Time, CPU and peak RSS growth to have a large JSON body as Python objects."""
    import gc

    call, close = request_loop(variant, url, "GET", cafile)
    gc.collect()
    before = peak_rss_mib()
    wall, cpu = time.perf_counter(), time.process_time()
    value = call()
    result = {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "rss": peak_rss_mib() - before,
    }
    assert value, "empty result"
    close()
    return result


def measure_download(
    variant: str, url: str, destination: str, cafile: str, sha256: str, connections: int
) -> dict[str, float]:
    context = tls_context(cafile)
    digest = None if sha256 == "-" else sha256
    if variant.startswith("curl"):
        return run_commands(curl_commands(variant, url, destination, cafile), digest)
    wall, cpu = time.perf_counter(), time.process_time()
    if variant == "dataset_client":
        import urllib.parse

        import dataset_client

        parts = urllib.parse.urlsplit(url)
        with dataset_client.DatasetClient(
            f"{parts.scheme}://{parts.netloc}", ssl_context=context
        ) as client:
            if (
                dataset_client.__version__ == "1.0.0"
            ):  # the previous release: it would replace /dev/null by a file
                with open(destination, "wb") as sink:
                    client.download(url, sink, sha256=digest)
            else:
                client.download(url, destination, sha256=digest, connections=connections)
    elif variant == "requests":
        import requests

        with requests.get(url, stream=True, verify=cafile if cafile != "-" else True) as response:
            response.raise_for_status()
            with open(destination, "wb") as sink:
                for chunk in response.iter_content(CHUNK):
                    sink.write(chunk)
    elif variant == "httpx":
        import httpx

        with httpx.stream("GET", url, verify=context if context is not None else True) as response:
            response.raise_for_status()
            with open(destination, "wb") as sink:
                for chunk in response.iter_bytes():
                    sink.write(chunk)
    else:
        raise SystemExit(f"unknown variant {variant}")
    return {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "rss": peak_rss_mib(),
    }


def curl_commands(variant: str, url: str, destination: str, cafile: str) -> list[list[str]]:
    """curl, or what a careful user runs to check a digest: curl then openssl (piped when nothing is kept)."""
    curl = ["curl", "-sS", "--fail", *(["--cacert", cafile] if cafile != "-" else []), url]
    if variant == "curl":
        return [[*curl, "-o", destination]]
    if destination == "/dev/null":
        return [curl, ["openssl", "dgst", "-sha256", "-r"]]
    return [[*curl, "-o", destination], ["openssl", "dgst", "-sha256", "-r", destination]]


def run_commands(commands: list[list[str]], digest: str | None) -> dict[str, float]:
    """Run one command, two in turn, or (the first's output unused) two in a pipe; check the digest printed."""
    wall = time.perf_counter()
    if len(commands) == 2 and "-o" not in commands[0]:
        first = subprocess.Popen(commands[0], stdout=subprocess.PIPE)
        output = subprocess.run(
            commands[1], stdin=first.stdout, capture_output=True, check=True
        ).stdout
        first.stdout.close()  # type: ignore[union-attr]
        if first.wait() != 0:
            raise SystemExit("curl failed")
    else:
        output = b"".join(
            subprocess.run(command, check=True, capture_output=True).stdout for command in commands
        )
    elapsed = time.perf_counter() - wall
    if digest is not None and not output.decode().startswith(digest):
        raise SystemExit(f"wrong digest: {output!r}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": elapsed, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024}


def main(argv: list[str]) -> None:
    kind, variant, *rest = argv
    if kind == "import":
        result = measure_import(variant)
    elif kind == "construct":
        result = measure_construct(variant, int(rest[0]))
    elif kind == "requests":
        result = measure_requests(variant, rest[0], rest[1], int(rest[2]), rest[3])
    elif kind == "bigjson":
        result = measure_bigjson(variant, rest[0], rest[1])
    elif kind == "download":
        result = measure_download(variant, rest[0], rest[1], rest[2], rest[3], int(rest[4]))
    elif kind == "bare":
        result = {"rss": peak_rss_mib()}
    else:
        raise SystemExit(f"unknown measurement {kind}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
