"""One Python's side of .ci/tls_inspecting_proxy.py: the client through a TLS-inspecting proxy.

    python .ci/tls_probe.py PROXY_URL ORIGIN_URL CA_FILE SHA256

PROXY_URL is the inspecting proxy (HTTPS_PROXY), ORIGIN_URL the service behind it (its
certificate is for 127.0.0.1 and localhost; the proxy re-signs with its CA, CA_FILE, and
forges a certificate for another name when asked for localhost), SHA256 the digest of
files/blob.bin there. Prints one line per check; exit status 1 when one fails.
"""

from __future__ import annotations

import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dataset_client as dc  # this repository's

failures = 0


def check(name: str, call: Callable[[], object], expected: Callable[[object], bool]) -> None:
    global failures
    try:
        outcome: object = call()
    except Exception as exc:  # the outcome, to compare
        outcome = exc
    good = expected(outcome)
    failures += not good
    print(f"{'ok' if good else 'FAILED'}: {name}{'' if good else f': {outcome!r}'}", flush=True)


def refused_with(text: str) -> Callable[[object], bool]:
    return lambda outcome: isinstance(outcome, dc.NetworkError) and text in str(outcome)


def environment(**names: str) -> None:
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        os.environ.pop(name, None)
    os.environ.update(names)


def service_calls(origin: str, sha256: str, trusted_by: str) -> None:
    client = dc.DatasetClient(origin, api_key="k-0123", max_retries=0, timeout=20)
    with client, tempfile.TemporaryDirectory() as directory:
        check(
            f"list_datasets through the proxy ({trusted_by})",
            client.list_datasets,
            lambda r: r == ["nginx"],
        )
        check(
            f"query ({trusted_by})",
            lambda: client.query("SELECT 1"),
            lambda r: r == {"columns": ["x"], "rows": [[1]]},
        )
        target = Path(directory, "blob.bin")
        check(
            f"download, sha256 checked ({trusted_by})",
            lambda: client.download("files/blob.bin", target, sha256=sha256),
            lambda r: r is None and target.stat().st_size > 0,
        )


def main(proxy: str, origin: str, ca_file: str, sha256: str) -> int:
    print(
        "==", sys.executable, sys.version.split()[0], "through the TLS-inspecting proxy", flush=True
    )
    os.environ.update({"HTTPS_PROXY": proxy, "NO_PROXY": ""})
    os.environ.pop("HTTP_PROXY", None)
    environment(SSL_CERT_FILE=ca_file)
    service_calls(origin, sha256, "SSL_CERT_FILE")
    environment(REQUESTS_CA_BUNDLE=ca_file)
    service_calls(origin, sha256, "REQUESTS_CA_BUNDLE")
    environment(SSL_CERT_FILE=ca_file)
    wrong_name = origin.replace(
        "127.0.0.1", "localhost"
    )  # the proxy forges a certificate for another name
    call = dc.DatasetClient(wrong_name, max_retries=0, timeout=20).list_datasets
    check("a wrong name is refused", call, refused_with("Hostname mismatch"))
    environment()
    call = dc.DatasetClient(origin, max_retries=0, timeout=20).list_datasets
    check(
        "the proxy's CA unknown: refused",
        call,
        refused_with("unable to get local issuer certificate; trusted:"),
    )
    if sys.version_info >= (3, 13):  # its default context has VERIFY_X509_STRICT: this CA fails it
        environment(SSL_CERT_FILE=ca_file)
        check(
            "plain urllib.request.urlopen fails (Python 3.13+'s strict default context)",
            lambda: urllib.request.urlopen(origin + "/datasets", timeout=20).read(),
            lambda outcome: (
                isinstance(outcome, urllib.error.URLError) and "not marked critical" in str(outcome)
            ),
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
