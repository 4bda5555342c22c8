"""The client against real S3 implementations: moto's server (PyPI) and s3rver (npm).

For each store, on free ports of 127.0.0.1: a stand-in service answers POST /exports with
an export whose download_url is a URL presigned by boto3 on the store's origin; the client
downloads it byte-exact with connections=4 and resume=True, and no Authorization header
reaches the store (moto's request recording; a recording relay in front of s3rver). A URL
the store refuses ends after one request, the store's reason in the error and the signature
redacted in str(), repr() and the log: an expired one for s3rver, which checks expiry as S3
does; a missing key for moto, which does not check expiry. s3rver also refuses a second
auth mechanism (a key sent with a presigned URL): tried once, to show the check can fail.

    python3 .ci/object_store_checks.py

moto and boto3 go into a virtual environment of their own, s3rver into an npm prefix, both
cached under ${TMPDIR:-/tmp}: never the library's or the README's dependencies. Where pip or
npm cannot reach its registry, a line "SKIPPED: why" (.ci/run counts it), exit status 0.
Exit status 1 when a check fails. Stops every process it starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import http.server
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TMPDIR") or "/tmp")
VENV, PINS = CACHE / "dataset-client-ci-moto", "moto[server]==5.2.5 boto3==1.44.8"
NPM, S3RVER = CACHE / "dataset-client-ci-s3rver", "s3rver@3.7.1"
KEY = "sk-object-store-checks-0123456789"  # the stand-in service's, never the store's
DATA = hashlib.sha256(b"seed").digest() * (5 * 1024 * 1024 // 32 + 7)  # 5 MiB and a bit: 4 parts
SIGNED = {"x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature"}
Requests = Callable[[], list[dict[str, Any]]]  # what reached a store: method, path, headers


def prepare() -> list[str] | None:
    """Install moto and boto3, and s3rver (once: cached): the stores to check, None for none."""
    pins = VENV / "pins"
    if not pins.exists() or pins.read_text() != PINS:
        pip = [str(VENV / "bin/python"), "-m", "pip", "install", "--quiet", "--timeout", "20"]
        pip += ["--retries", "1", "--disable-pip-version-check", *PINS.split()]
        if not (run([sys.executable, "-m", "venv", "--clear", str(VENV)]) and run(pip)):
            print(f"SKIPPED: the object store checks: pip install {PINS} failed (no index)")
            return None
        pins.write_text(PINS)
    if (NPM / "pins").exists() and (NPM / "pins").read_text() == S3RVER:
        return ["moto", "s3rver"]
    npm = ["npm", "install", "--prefix", str(NPM), "--no-audit", "--no-fund", "--silent", S3RVER]
    if run(npm) and (NPM / "node_modules/.bin/s3rver").exists():
        (NPM / "pins").write_text(S3RVER)
        return ["moto", "s3rver"]
    print(f"SKIPPED: the s3rver checks: npm install {S3RVER} failed (no npm, or no registry)")
    return ["moto"]


def run(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def started(command: list[str], port: int, log: Path, **options: Any) -> Iterator[None]:
    """A store's process, once it accepts on ``port``; stopped (by its pid) when the block ends."""
    with open(log, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, **options)
    try:
        for _ in range(300):  # 30 s at most
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        else:
            raise RuntimeError(f"{command[0]} did not start on 127.0.0.1:{port} in 30 s")
        yield
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def serving(server: http.server.ThreadingHTTPServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):  # a client that closed an idle connection
            super().handle()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def answer(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        self.send_response(status)
        hop_by_hop = ("connection", "keep-alive", "transfer-encoding", "content-length")
        for name, value in headers:
            if name.lower() not in hop_by_hop:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def export_service(download_url: str) -> http.server.ThreadingHTTPServer:
    """The stand-in service: POST /api/exports, with the key, answers an export of the URL."""
    export = {"id": "e1", "download_url": download_url, "sha256": hashlib.sha256(DATA).hexdigest()}

    class Service(Quiet):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            json_type = [("Content-Type", "application/json")]
            if self.path == "/api/exports" and self.headers["Authorization"] == f"Bearer {KEY}":
                self.answer(201, json.dumps(export).encode(), json_type)
            else:
                self.answer(401, b'{"message": "no such key"}', json_type)

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Service)


class Relay(http.server.ThreadingHTTPServer):
    """In front of a store: records each request (method, path, headers), then sends it on as it
    came, Host included (a presigned URL may sign it), and the store's answer back."""

    daemon_threads = True

    def __init__(self, store_port: int) -> None:
        super().__init__(("127.0.0.1", 0), RelayHandler)
        self.store_port = store_port
        self.records: list[dict[str, Any]] = []


class RelayHandler(Quiet):
    server: Relay

    def do_GET(self) -> None:
        headers = dict(self.headers.items())
        self.server.records.append({"method": self.command, "path": self.path, "headers": headers})
        store = http.client.HTTPConnection("127.0.0.1", self.server.store_port, timeout=30)
        try:
            store.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                if name.lower() != "connection":
                    store.putheader(name, value)
            store.endheaders()
            answer = store.getresponse()
            self.answer(answer.status, answer.read(), answer.getheaders())
        finally:
            store.close()


class Checks:
    def __init__(self) -> None:
        self.passed = self.failed = 0

    def check(self, name: str, condition: object, detail: object = "") -> None:
        self.passed += bool(condition)
        self.failed += not condition
        print(f"{'ok' if condition else 'FAILED'}: {name}{'' if condition else f': {detail}'}")


class Logged(logging.Handler):
    """The client's log records (what -v shows): each message, and its arguments."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.getMessage()} {record.args!r}")


def signature_values(url: str) -> list[str]:
    """The values of ``url``'s credential parameters, as sent and decoded."""
    fields = [field.partition("=") for field in urllib.parse.urlsplit(url).query.split("&")]
    values = [value for name, _, value in fields if name.lower() in SIGNED and value]
    return [form for value in values for form in (value, urllib.parse.unquote(value))]


def has(request: dict[str, Any], header: str) -> bool:
    return header in {name.lower() for name in request["headers"]}


def download_checks(checks: Checks, store: str, url: str, requests: Requests, work: Path) -> None:
    """``url``, exported, downloaded byte-exact on 4 connections, resumable, no key to the store."""
    import dataset_client as dc

    before, destination = len(requests()), work / f"{store}.parquet"
    dates = {"start_date": "2024-01-01", "end_date": "2024-01-31"}
    with serving(export_service(url)) as service, dc.DatasetClient(service + "/api", KEY) as client:
        export = client.create_export("daily_bars", symbols="AAPL", **dates)
        options = {"connections": 4, "resume": True, "sha256": export["sha256"]}
        client.download(export["download_url"], destination, **options)
    exact = destination.read_bytes() == DATA
    checks.check(f"{store}: the presigned export downloaded byte-exact", exact)
    gets = [request for request in requests()[before:] if request["method"] == "GET"]
    ranged = [request["headers"] for request in gets if has(request, "range")]
    checks.check(f"{store}: on 4 connections, ranges asked", len(ranged) >= 3, gets)
    keyed = [request for request in gets if has(request, "authorization")]
    checks.check(f"{store}: no Authorization reached the store ({len(gets)} GETs)", not keyed, gets)
    path = url[url.index("/", len("http://")) :]
    checks.check(f"{store}: the URL sent as presigned", all(r["path"] == path for r in gets), gets)
    left = sorted(path.name for path in work.iterdir())
    checks.check(f"{store}: nothing left beside the file", left == [destination.name], left)
    destination.unlink()


def refusal_checks(checks: Checks, store: str, url: str, requests: Requests, *reason: str) -> None:
    """A URL the store refuses: one request, the store's reason in the error, no signature shown."""
    import dataset_client as dc

    before, logged, logger = len(requests()), Logged(), logging.getLogger("dataset_client")
    logger.addHandler(logged)
    logger.setLevel(logging.DEBUG)
    dates = {"start_date": "2024-01-01", "end_date": "2024-01-31"}
    error: BaseException | None = None
    try:
        with serving(export_service(url)) as service, dc.DatasetClient(service + "/api", KEY) as c:
            export = c.create_export("daily_bars", symbols="AAPL", **dates)
            with tempfile.TemporaryDirectory() as directory:
                try:
                    c.download(export["download_url"], f"{directory}/x", connections=4, resume=True)
                except dc.DatasetClientError as raised:
                    error = raised
                left = os.listdir(directory)
    finally:
        logger.removeHandler(logged)
    print(f"    {error}")
    checks.check(f"{store}: refused, the store's reason said", all(map(str(error).count, reason)))
    checks.check(f"{store}: after one request", len(requests()) - before == 1, requests()[before:])
    shown = [str(error), repr(error), repr(getattr(error, "args", ())), *logged.lines]
    values = signature_values(url)
    leaked = [value for value in values for text in shown if value in text]
    checks.check(f"{store}: no signature in str(), repr(), args or the log", values and not leaked)
    checks.check(f"{store}: names kept, values redacted", "Signature=<redacted>" in str(error))
    checks.check(f"{store}: nothing left behind", left == [], left)


def s3_client(endpoint: str, signature_version: str, key: str, secret: str) -> Any:
    import boto3  # type: ignore[import-not-found]  # in the venv this runs in
    from botocore.config import Config  # type: ignore[import-not-found]

    config = Config(signature_version=signature_version, s3={"addressing_style": "path"})
    credentials = {"aws_access_key_id": key, "aws_secret_access_key": secret}
    options = {"endpoint_url": endpoint, "region_name": "us-east-1", "config": config}
    return boto3.client("s3", **options, **credentials)


def presigned(s3: Any, key: str = "exp.parquet", seconds: int = 3600) -> str:
    parameters = {"Bucket": "exports", "Key": key}
    return str(s3.generate_presigned_url("get_object", Params=parameters, ExpiresIn=seconds))


def moto_checks(checks: Checks, work: Path) -> None:
    port, recording = free_port(), work.parent / "moto-recording.jsonl"
    moto = [str(VENV / "bin/moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    recorded = {"MOTO_ENABLE_RECORDING": "True", "MOTO_RECORDER_FILEPATH": str(recording)}
    with started(moto, port, work.parent / "moto.log", env={**os.environ, **recorded}):
        s3 = s3_client(f"http://127.0.0.1:{port}", "s3v4", "AKIAOBJECTSTORECHECKS", "secret")
        s3.create_bucket(Bucket="exports")
        s3.put_object(Bucket="exports", Key="exp.parquet", Body=DATA)
        recording.write_text("")  # from here on, what the client sent

        def requests() -> list[dict[str, Any]]:  # a recorded url is the whole URL: its path taken
            lines = [json.loads(line) for line in recording.read_text().splitlines()]
            return [{**line, "path": line["url"][line["url"].index("/", 7) :]} for line in lines]

        download_checks(checks, "moto", presigned(s3), requests, work)
        reason = "NoSuchKey: The specified key does not exist."
        missing = presigned(s3, "gone")
        refusal_checks(checks, "moto", missing, requests, "404 ", "GET http://", reason)


def s3rver_checks(checks: Checks, work: Path) -> None:
    import dataset_client as dc

    port, relay = free_port(), Relay(free_port())
    s3rver = [str(NPM / "node_modules/.bin/s3rver"), "-d", str(work.parent / "s3rver-data")]
    s3rver += ["-a", "127.0.0.1", "-p", str(port), "--configure-bucket", "exports", "--silent"]
    relay.store_port = port
    with started(s3rver, port, work.parent / "s3rver.log"), serving(relay) as origin:
        # s3rver's own account. It checks a V2 signature, and a V4 one's expiry (not its signature).
        direct = s3_client(f"http://127.0.0.1:{port}", "s3v4", "S3RVER", "S3RVER")
        direct.put_object(Bucket="exports", Key="exp.parquet", Body=DATA)
        expired = presigned(s3_client(origin, "s3v4", "S3RVER", "S3RVER"), seconds=1)
        url = presigned(s3_client(origin, "s3", "S3RVER", "S3RVER"))

        def requests() -> list[dict[str, Any]]:
            return list(relay.records)

        download_checks(checks, "s3rver", url, requests, work)
        time.sleep(max(0.0, 1.5 - time.time() % 1))  # X-Amz-Date counts whole seconds
        reason = "AccessDenied: Request has expired"
        refusal_checks(checks, "s3rver", expired, requests, "403 Forbidden: GET http://", reason)
        # The control: a client whose base_url is the store's origin sends its key there too.
        with dc.DatasetClient(origin, KEY, max_retries=0) as client:
            try:
                client.download(url, work / "keyed.parquet")
                refused = ""
            except dc.ServiceError as error:
                refused = str(error)
        checks.check("s3rver: refuses a second auth mechanism", "Only one auth" in refused, refused)


def main() -> int:
    if "--stores" not in sys.argv:  # under python3: install, then again under the venv's (boto3)
        stores = prepare()
        if stores is None:
            return 0
        python = str(VENV / "bin/python")
        os.execv(python, [python, __file__, "--stores", *stores])
    stores = sys.argv[sys.argv.index("--stores") + 1 :]
    for name in [name for name in os.environ if name.lower().endswith("_proxy")]:
        os.environ.pop(name)
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"
    sys.path.insert(0, str(ROOT))
    print("== presigned URLs from real S3 implementations:", ", ".join(stores), flush=True)
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="dataset-client-s3-") as directory:
        for store in stores:
            work = Path(directory, store)
            work.mkdir()
            (moto_checks if store == "moto" else s3rver_checks)(checks, work)
    print(f"object store checks: {checks.passed} passed, {checks.failed} failed", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
