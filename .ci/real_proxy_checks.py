"""NO_PROXY, and a proxy that wants credentials (407), through a real proxy: Debian's tinyproxy.

Everything on loopback, on free ports: tinyproxy on 127.0.0.1, origins on 127.0.0.1 and
[::1] (when this machine has IPv6 loopback), a TLS origin for CONNECT. Each NO_PROXY form
is judged by what the proxy logged and by the Via header the origin received.

    python3 .ci/real_proxy_checks.py     # apt-get installs tinyproxy when root and it is missing

Where tinyproxy cannot be had, a line "SKIPPED: why" (.ci/run counts it), exit status 0.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import dataset_client as dc  # noqa: E402  (from this repository, whatever is installed)

sys.path.insert(0, str(ROOT / "examples"))
from local_service import serving  # noqa: E402  (a server run for the length of a with block)

USER, PASSWORD = (
    "alice",
    "s3cret-Corp_9",
)  # tinyproxy's BasicAuth takes word characters and '-' only


class Origin(http.server.ThreadingHTTPServer):
    """GET /api/datasets answers ["ok"]; records the Via header of each request (set by the proxy)."""

    daemon_threads = True

    def __init__(self, host: str, tls: bool = False) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, 0), OriginHandler)
        self.vias: list[str | None] = []
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(ROOT / "tests_data" / "server.pem")
            self.socket = context.wrap_socket(self.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{self.server_port}/api"


class OriginHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Origin

    def do_GET(self) -> None:
        self.server.vias.append(self.headers.get("Via"))
        body = json.dumps(["ok"]).encode()
        self.send_response(200 if self.path == "/api/datasets" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Tinyproxy:
    """tinyproxy in the foreground on a free port of 127.0.0.1; ``requests()``: the request lines it logged."""

    def __init__(self, directory: Path, basic_auth: bool) -> None:
        self.log = directory / f"tinyproxy-{'auth' if basic_auth else 'open'}.log"
        self.port = free_port()
        config = directory / f"tinyproxy-{self.port}.conf"
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Timeout 30",
            f'LogFile "{self.log}"',
            "LogLevel Connect",
        ]
        lines += [
            "MaxClients 20",
            "Allow 127.0.0.1",
            *([f"BasicAuth {USER} {PASSWORD}"] if basic_auth else []),
        ]
        config.write_text("\n".join(lines) + "\n")
        self.process = subprocess.Popen(
            ["tinyproxy", "-d", "-c", str(config)], stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not accepts(self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(
                    f"tinyproxy did not start on 127.0.0.1:{self.port} (see {self.log})"
                )
            time.sleep(0.05)

    def url(self, credentials: str = "") -> str:
        return f"http://{credentials}127.0.0.1:{self.port}"

    def requests(self) -> list[str]:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [
            line.split("): ", 1)[1]
            for line in text.splitlines()
            if "Request (file descriptor" in line
        ]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


class Checks:
    def __init__(self) -> None:
        self.passed = self.failed = 0

    def check(self, name: str, condition: bool, detail: str = "") -> None:
        self.passed += condition
        self.failed += not condition
        print(
            f"{'ok' if condition else 'FAILED'}: {name}{'' if condition else ': ' + detail}",
            flush=True,
        )


def route(proxy: Tinyproxy, origin: Origin, no_proxy: str) -> str:
    """'proxy' or 'direct': how one list_datasets() went with this NO_PROXY, by the proxy's log and the Via header."""
    os.environ.update({"HTTP_PROXY": proxy.url(), "NO_PROXY": no_proxy})
    logged, seen = len(proxy.requests()), len(origin.vias)
    with dc.DatasetClient(origin.url, timeout=10, max_retries=0) as client:
        answered = client.list_datasets()
    if answered != ["ok"]:
        return f"answered {answered!r}"
    # tinyproxy write()s its log line as soon as it has read the request, before it connects onwards.
    through_log = len(proxy.requests()) > logged
    through_via = origin.vias[seen] is not None and "tinyproxy" in (origin.vias[seen] or "")
    return (
        "proxy"
        if through_log and through_via
        else "direct"
        if not (through_log or through_via)
        else "mixed"
    )


def no_proxy_checks(checks: Checks, proxy: Tinyproxy, origins: dict[str, Origin]) -> None:
    v4, name = origins["127.0.0.1"], origins["localhost"]
    port, name_port = v4.server_port, name.server_port
    # For each origin: the NO_PROXY values that must send it direct, then those that must not.
    direct: dict[Origin, list[str]] = {
        v4: [
            "127.0.0.0/8",
            "10.0.0.0/8, 127.0.0.0/30",
            "127.0.0.1",
            f"127.0.0.1:{port}",
            "*",
            " example.com ,  127.0.0.1  ",
        ],
        name: ["LOCALHOST", ".localhost", " Example.COM,\t.LocalHost ", f"localhost:{name_port}"],
    }
    proxied: dict[Origin, list[str]] = {
        v4: ["10.0.0.0/8, 192.168.0.0/16", "127.0.0.10", f"127.0.0.1:{port + 1}", "::/0"],
        name: ["host", "127.0.0.0/8"],
    }
    if "::1" in origins:
        v6 = origins["::1"]
        direct[v6] = ["::1/128", "::/0", "::1", f"[::1]:{v6.server_port}", "[::1]"]
        proxied[v6] = ["fd00::/8", "127.0.0.0/8", f"[::1]:{v6.server_port + 1}"]
    cases = [(origin, value, "direct") for origin, values in direct.items() for value in values]
    cases += [(origin, value, "proxy") for origin, values in proxied.items() for value in values]
    for origin, no_proxy, expected in cases:
        got = route(proxy, origin, no_proxy)
        checks.check(
            f"NO_PROXY={no_proxy!r} for {origin.url}: {expected}", got == expected, f"went {got}"
        )


def refused(call: Callable[[], object]) -> dc.DatasetClientError | None:
    try:
        call()
    except dc.DatasetClientError as error:
        return error
    return None


def everything_shown(error: BaseException) -> str:
    shown = traceback.TracebackException.from_exception(error, capture_locals=True).format()
    return "".join([str(error), repr(error), *shown])


def credentials_checks(checks: Checks, proxy: Tinyproxy, plain: Origin, tls: Origin) -> None:
    os.environ["SSL_CERT_FILE"] = str(ROOT / "tests_data" / "ca.pem")
    os.environ["NO_PROXY"] = ""
    cases = [("none", ""), ("wrong", f"{USER}:wrong-{PASSWORD}@")]
    for label, credentials in cases:
        for origin, variable in ((plain, "HTTP_PROXY"), (tls, "HTTPS_PROXY")):
            os.environ[variable] = proxy.url(credentials)
            logged = len(proxy.requests())
            with dc.DatasetClient(
                origin.url, timeout=10, max_retries=3, backoff_factor=0.01
            ) as client:
                error = refused(client.list_datasets)
            what = f"407 with {label} credentials in {variable}"
            if isinstance(error, dc.ServiceError) and error.status == 401 and label == "wrong":
                # tinyproxy 1.11 answers a plain-HTTP request with wrong credentials 401 (WWW-Authenticate),
                # not 407: nothing tells that from the origin's own 401, so it stays a ServiceError.
                what = f"tinyproxy's 401 for {label} credentials in {variable}"
                checks.check(
                    f"{what}: one attempt",
                    error.attempts == 1 and len(proxy.requests()) == logged + 1,
                )
                checks.check(
                    f"{what}: the password shown nowhere", PASSWORD not in everything_shown(error)
                )
                continue
            checks.check(f"{what}: a NetworkError", isinstance(error, dc.NetworkError), repr(error))
            if error is None:
                continue
            text = str(error)
            checks.check(
                f"{what}: one attempt",
                error.attempts == 1 and len(proxy.requests()) == logged + 1,
                text,
            )
            wanted = [
                f"{variable}=http://USER:PASSWORD@127.0.0.1:{proxy.port}",
                "percent-encoded",
                "cntlm or px",
            ]
            checks.check(f"{what}: says what to do", all(word in text for word in wanted), text)
            checks.check(
                f"{what}: the password shown nowhere", PASSWORD not in everything_shown(error)
            )
    cli_checks(checks, proxy, tls)
    os.environ["HTTP_PROXY"] = os.environ["HTTPS_PROXY"] = proxy.url(f"{USER}:{PASSWORD}@")
    for origin, how in ((plain, "plain HTTP"), (tls, "CONNECT")):
        logged, seen = len(proxy.requests()), len(origin.vias)
        with dc.DatasetClient(origin.url, timeout=10, max_retries=0) as client:
            result = client.list_datasets()
        checks.check(
            f"the right credentials work over {how}",
            result == ["ok"] and len(origin.vias) == seen + 1,
        )
        checks.check(
            f"...and through the proxy ({how})",
            len(proxy.requests()) == logged + 1,
            str(proxy.requests()),
        )


def cli_checks(checks: Checks, proxy: Tinyproxy, origin: Origin) -> None:
    environment = {
        **os.environ,
        "HTTPS_PROXY": proxy.url(f"{USER}:wrong-{PASSWORD}@"),
        "PYTHONPATH": str(ROOT),
    }
    environment.pop("DATASET_CLIENT_API_KEY", None)
    command = [sys.executable, "-m", "dataset_client", "--base-url", origin.url, "datasets"]
    run = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)
    lines = run.stderr.splitlines()
    checks.check(
        "the CLI on a 407: exit 3, one line", run.returncode == 3 and len(lines) == 1, run.stderr
    )
    checks.check(
        "the CLI on a 407: names the variable",
        "HTTPS_PROXY=http://USER:PASSWORD@" in run.stderr,
        run.stderr,
    )
    checks.check("the CLI on a 407: no password", PASSWORD not in run.stderr + run.stdout)


def apt_install(package: str) -> None:
    """apt-get install, as root; apt's package lists are refreshed first only when that fails."""
    install = ["apt-get", "install", "-y", "-q", package]
    if subprocess.run(install, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True)
        subprocess.run(install, capture_output=True)


def main() -> int:
    if shutil.which("tinyproxy") is None and os.geteuid() == 0:
        apt_install("tinyproxy")
    if shutil.which("tinyproxy") is None:
        print(
            "SKIPPED: real proxy checks: tinyproxy is not installed (apt-get install tinyproxy, as root)"
        )
        return 0
    for name in [
        *(n for n in os.environ if n.lower().endswith("_proxy")),
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    ]:
        os.environ.pop(name, None)
    print("== NO_PROXY and 407 through tinyproxy, under", sys.version.split()[0], flush=True)
    if not has_ipv6_loopback():
        print("SKIPPED: the [::1] NO_PROXY cases: no IPv6 loopback here")
    checks = Checks()
    hosts = ["127.0.0.1", "localhost", *(["::1"] if has_ipv6_loopback() else [])]
    with (
        tempfile.TemporaryDirectory(prefix="dataset-client-proxies-") as directory,
        contextlib.ExitStack() as stack,
    ):
        origins = {host: Origin("127.0.0.1" if host == "localhost" else host) for host in hosts}
        for origin in origins.values():
            stack.enter_context(serving(origin))
        origins["localhost"].url = origins["localhost"].url.replace("127.0.0.1", "localhost")
        tls = stack.enter_context(serving(Origin("127.0.0.1", tls=True)))
        for basic_auth in (False, True):
            proxy = Tinyproxy(Path(directory), basic_auth)
            stack.callback(proxy.stop)
            if basic_auth:
                credentials_checks(checks, proxy, origins["127.0.0.1"], tls)
            else:
                no_proxy_checks(checks, proxy, origins)
    print(f"proxy checks: {checks.passed} passed, {checks.failed} failed", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
