"""Proxies (the variables, NO_PROXY, credentials, CONNECT) and TLS (what is trusted, ca_bundle, a
wrong scheme found by one probe).
"""

from __future__ import annotations

import base64
import contextlib
import os
import pickle
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
import traceback
import urllib.parse as urllib_parse
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
from dataset_client import DatasetClient
from tests.support import (
    CA_FILE,
    KEY,
    ROOT,
    ServerTestCase,
    answer,
    hang_up,
    head_server,
    hold,
    outcome_of,
    reply,
    server_tls_context,
    trust_the_test_ca_alone,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


def make_lenient_ca(directory: Path) -> tuple[str, str]:
    """With openssl: a CA whose basicConstraints is not critical (as many TLS-inspecting proxies'), and a
    certificate (and key) it signed for 127.0.0.1 only. Returns their two PEM file names."""
    (directory / "ca.cnf").write_text(
        "[req]\ndistinguished_name = dn\nx509_extensions = ext\nprompt = no\n[dn]\nCN = lenient test CA\n"
        "[ext]\nbasicConstraints = CA:TRUE\nkeyUsage = keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n"
    )
    (directory / "server.ext").write_text(
        "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n"
        "authorityKeyIdentifier = keyid\nsubjectKeyIdentifier = hash\n"
    )
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    sign = ["-days", "3650", "-extfile", "server.ext", "-out", "server.crt"]
    for command in (
        [
            "req",
            "-x509",
            "-config",
            "ca.cnf",
            *key,
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "3650",
        ],
        [
            "req",
            "-new",
            *key,
            "-keyout",
            "server.key",
            "-subj",
            "/CN=127.0.0.1",
            "-out",
            "server.csr",
        ],
        [
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "7",
            *sign,
        ],
    ):
        subprocess.run(
            ["openssl", *command], cwd=directory, check=True, capture_output=True, timeout=60
        )
    chain = directory / "server.pem"
    chain.write_text(
        (directory / "server.crt").read_text() + (directory / "server.key").read_text()
    )
    return str(directory / "ca.pem"), str(chain)


class ProxyAndTLSTests(ServerTestCase):
    def test_http_proxy_and_no_proxy(self) -> None:
        proxy = self.start_proxy()
        os.environ["HTTP_PROXY"] = f"http://user:pa%40ss@127.0.0.1:{proxy.server_address[1]}"
        os.environ["NO_PROXY"] = ""
        self.script(reply(body=["via proxy"]), reply(body=["via proxy"]))
        client = self.client()
        self.assertEqual(client.list_datasets(), ["via proxy"])
        self.assertEqual(client.list_datasets(), ["via proxy"])
        self.assertEqual(proxy.lines[0], f"GET {self.server.url}/api/v1/datasets HTTP/1.1")
        self.assertEqual(proxy.proxy_authorizations[0], "Basic dXNlcjpwYUBzcw==")  # user:pa@ss
        self.assertEqual(self.requests[0].headers["Authorization"], f"Bearer {KEY}")
        self.assertNotIn("Proxy-Authorization", self.requests[0].headers)
        os.environ["NO_PROXY"] = " localhost , 127.0.0.1 ,"  # stray whitespace and an empty entry
        self.script(reply(body=["direct"]))
        self.assertEqual(self.client().list_datasets(), ["direct"])
        self.assertEqual(len(self.requests), 3)
        self.assertEqual(
            len(proxy.lines), 1, "one kept-alive connection to the proxy, none for the bypass"
        )

    def test_empty_proxy_variables_are_ignored(self) -> None:
        os.environ.update({"HTTP_PROXY": "", "HTTPS_PROXY": "", "NO_PROXY": ""})
        self.script(reply(body=[]))
        self.assertEqual(self.client().list_datasets(), [])

    def test_a_proxy_variable_with_a_bad_port_is_refused_naming_it(self) -> None:
        # The fourth review's second pass: accepted, then each request escaped as a bare
        # http.client.InvalidURL, a traceback of 50 lines from the library and the command line.
        for port in ("notaport", "99999"):
            with self.subTest(port=port):
                os.environ["HTTP_PROXY"] = f"http://alice:proxy-pass-0099@127.0.0.1:{port}"
                error = outcome_of(lambda: DatasetClient(self.server.url, max_retries=0))
                self.assertIsInstance(error, ValueError)
                self.assertTrue(str(error).startswith("HTTP_PROXY is not a valid proxy URL ("))
                self.assertNotIn("proxy-pass-0099", str(error))
        self.assertEqual(self.requests, [])

    def test_a_proxy_password_with_a_slash_is_read_as_urllib_sends_it(self) -> None:
        # Review 39: the bad-port check split the URL with urlsplit, which ends the authority at
        # the password's "/": the client refused to start, and the error said the password's start
        # ("Port could not be cast to integer value as 'alice-pa'") though "its value is not shown".
        proxy = self.start_proxy()
        os.environ["HTTP_PROXY"] = f"http://alice:alice-pa/ss99@127.0.0.1:{proxy.server_address[1]}"
        os.environ["NO_PROXY"] = ""
        self.script(reply(body=["via proxy"]))
        client = self.client()
        self.assertEqual(client.list_datasets(), ["via proxy"])
        basic = base64.b64encode(b"alice:alice-pa/ss99").decode()
        self.assertEqual(proxy.proxy_authorizations, [f"Basic {basic}"])
        echoed = f"alice-pa/ss99 {basic} {urllib_parse.quote(basic)}"
        self.assertEqual(client.redact(echoed), "<redacted> <redacted> <redacted>")
        os.environ["HTTP_PROXY"] = "http://alice:alice-pa/ss99@127.0.0.1:notaport"
        error = outcome_of(lambda: DatasetClient(self.server.url, max_retries=0))
        self.assertIsInstance(error, ValueError)
        self.assertTrue(str(error).startswith("HTTP_PROXY is not a valid proxy URL ("))
        self.assertNotIn("alice-pa", str(error))

    def test_tls_with_a_given_context(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        context = ssl.create_default_context(cafile=CA_FILE)
        client = self.client(tls.url + "/api", ssl_context=context)
        self.assertEqual(client.list_datasets(), {"tls": True})
        self.assertEqual(client.list_datasets(), {"tls": True})
        self.assertEqual(tls.connections, 1)

    def test_tls_with_ssl_cert_file(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        os.environ["SSL_CERT_FILE"] = CA_FILE
        self.assertEqual(self.client(tls.url + "/api").list_datasets(), {"tls": True})
        (request,) = tls.requests
        self.assertEqual((request.method, request.path), ("GET", "/api/datasets"))
        self.assertEqual(request.headers["Authorization"], f"Bearer {KEY}")

    def test_untrusted_certificate_is_refused_and_not_retried(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={})
        os.environ.pop("SSL_CERT_FILE", None)
        os.environ.pop("SSL_CERT_DIR", None)
        system_only = ssl.create_default_context()  # the system's CAs: not the test CA
        with self.assertRaisesRegex(dc.NetworkError, "certificate verification failed") as caught:
            self.client(tls.url + "/api", ssl_context=system_only).list_datasets()
        self.assertEqual(caught.exception.attempts, 1)
        self.assertTrue(
            caught.exception.certificate
        )  # a field, for callers (and the CLI) to act on
        self.assertTrue(pickle.loads(pickle.dumps(caught.exception)).certificate)
        self.assertEqual(tls.requests, [])
        wait_for(lambda: tls.tls_failures == 1)

    def test_https_through_a_connect_tunnel(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tunnel": True})
        proxy = self.start_proxy()
        os.environ["HTTPS_PROXY"] = f"http://127.0.0.1:{proxy.server_address[1]}"
        os.environ["NO_PROXY"] = "example.invalid"
        client = self.client(
            tls.url + "/api", ssl_context=ssl.create_default_context(cafile=CA_FILE)
        )
        self.assertEqual(client.list_datasets(), {"tunnel": True})
        self.assertEqual(client.list_datasets(), {"tunnel": True})
        self.assertEqual(len(proxy.lines), 1)
        self.assertRegex(proxy.lines[0], rf"^CONNECT 127\.0\.0\.1:{tls.server_port} HTTP/1\.[01]$")
        self.assertEqual(tls.requests[0].headers["Authorization"], f"Bearer {KEY}")
        self.assertEqual(tls.connections, 1)


class NoProxyTests(ServerTestCase):
    """NO_PROXY as requests and curl read it: each form checked by what the proxy received, or did not."""

    def setUp(self) -> None:
        super().setUp()
        self.proxy = self.start_proxy()
        os.environ["HTTP_PROXY"] = f"http://127.0.0.1:{self.proxy.server_address[1]}"

    def route(self, no_proxy: str, host: str = "127.0.0.1") -> str:
        """How one GET to the fixture server, named ``host``, went with this NO_PROXY: 'proxy' or 'direct'."""
        os.environ["NO_PROXY"] = no_proxy
        proxied, received = len(self.proxy.lines), len(self.requests)
        self.script(reply(body=["ok"]))
        url = f"http://{host}:{self.server.server_port}/api"
        self.assertEqual(self.client(url).list_datasets(), ["ok"])
        self.assertEqual(len(self.requests), received + 1)
        if len(self.proxy.lines) == proxied:
            return "direct"
        self.assertEqual(self.proxy.lines[-1], f"GET {url}/datasets HTTP/1.1")
        return "proxy"

    def assert_routes(self, host: str, expected: dict[str, str]) -> None:
        for no_proxy, route in expected.items():
            with self.subTest(no_proxy=no_proxy, host=host):
                self.assertEqual(self.route(no_proxy, host), route)

    def test_cidr_blocks_and_ip_addresses(self) -> None:
        self.assert_routes(
            "127.0.0.1",
            {
                "127.0.0.0/8": "direct",
                "10.0.0.0/8, 127.0.0.0/30": "direct",
                "127.0.0.1/8": "direct",  # host bits set: taken as its network, as requests does
                "127.0.0.2/31": "proxy",
                "10.0.0.0/8": "proxy",
                "::/0": "proxy",  # a v6 block never holds a v4 address
                "127.0.0.1": "direct",
                "127.0.0.10": "proxy",  # an address, never a string prefix
                "127.0.0": "proxy",
            },
        )

    def test_host_and_port(self) -> None:
        port = self.server.server_port
        self.assert_routes(
            "127.0.0.1", {f"127.0.0.1:{port}": "direct", f"127.0.0.1:{port + 1}": "proxy"}
        )
        self.assert_routes(
            "localhost", {f"localhost:{port}": "direct", f"LOCALHOST:{port + 1}": "proxy"}
        )

    def test_star_names_leading_dots_spaces_and_case(self) -> None:
        self.assert_routes("127.0.0.1", {"*": "direct", " * ": "direct", "example.com,*": "direct"})
        self.assert_routes(
            "localhost",
            {
                "LocalHost": "direct",
                ".localhost": "direct",  # a leading dot: the domain and its subdomains
                " example.com ,\tLOCALHOST. , ": "direct",
                "example.com localhost": "direct",  # blanks separate entries, as in curl
                "host": "proxy",  # a suffix of the name, not of its domain
                "calhost, .host": "proxy",
                "127.0.0.1": "proxy",  # no name is resolved to match an address (as requests, curl)
            },
        )

    def test_decisions_for_hosts_not_on_this_machine(self) -> None:
        rules = dc._NoProxy(
            " 10.0.0.0/8, FD00::/8 ,.corp.example, Internal.Example:8443, [fe80::1]:8080, 192.0.2.7 "
        )
        expected = {
            ("http", "10.1.2.3"): True,
            ("http", "10.1.2.3:8080"): True,
            ("http", "11.0.0.1"): False,
            ("https", "[fd12:3456::1]"): True,
            ("https", "[fe00::1]"): False,
            ("https", "a.b.corp.example"): True,
            ("https", "CORP.example"): True,
            ("https", "notcorp.example"): False,
            ("https", "internal.example:8443"): True,
            ("https", "internal.example"): False,  # port 443
            ("http", "[fe80::1]:8080"): True,
            ("http", "[fe80::1]"): False,  # port 80
            ("http", "192.0.2.7"): True,
            ("http", "192.0.2.70"): False,
            ("http", "host:notaport"): False,
        }
        for (scheme, host), bypass in expected.items():
            with self.subTest(scheme=scheme, host=host):
                self.assertIs(rules.matches(scheme, host), bypass)


class ProxyAuthenticationTests(ServerTestCase):
    """A proxy that wants credentials (407): one attempt, a message that says what to do, never the password."""

    PASSWORD = "s3cret@pa:ss"

    def setUp(self) -> None:
        super().setUp()
        self.proxy = self.start_proxy()
        self.proxy.required = self.basic(self.PASSWORD)
        self.where = f"127.0.0.1:{self.proxy.server_address[1]}"
        os.environ["NO_PROXY"] = ""

    def basic(self, password: str) -> str:
        """The Proxy-Authorization a client sends for alice and ``password``."""
        return "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()

    def proxy_url(self, password: str | None) -> str:
        credentials = "" if password is None else f"alice:{urllib_parse.quote(password, safe='')}@"
        return f"http://{credentials}{self.where}"

    def refused(self, url: str, **options: object) -> dc.NetworkError:
        with self.assertRaises(dc.NetworkError) as caught:
            self.client(url, max_retries=3, **options).list_datasets()
        error = caught.exception
        self.assertEqual(error.attempts, 1, "a 407 is not retried")
        self.assertEqual(len(self.proxy.lines), 1)
        shown = [
            str(error),
            repr(error),
            *traceback.TracebackException.from_exception(error, capture_locals=True).format(),
        ]
        for secret in (
            self.PASSWORD,
            urllib_parse.quote(self.PASSWORD, safe=""),
            self.proxy.required or "",
        ):
            self.assertNotIn(secret.split(" ")[-1], "".join(shown))
        copy = pickle.loads(pickle.dumps(error))
        self.assertEqual((str(copy), repr(copy.__cause__)), (str(error), repr(error.__cause__)))
        return error

    def advice(self, variable: str) -> str:
        return (
            f"set {variable}=http://USER:PASSWORD@{self.where} (USER and PASSWORD percent-encoded, @ as %40,"
            f" : as %3A). Only Basic proxy authentication is spoken: for an NTLM or Kerberos proxy, run a local"
            f" relay such as cntlm or px and point {variable} at it"
        )

    def test_missing_credentials_over_plain_http(self) -> None:
        os.environ["HTTP_PROXY"] = self.proxy_url(None)
        url = self.server.url + "/api"
        error = self.refused(url)
        self.assertEqual(
            str(error),
            f"GET {url}/datasets via proxy {self.where} (NO_PROXY bypasses it): 407 Proxy Authentication Required:"
            f" the proxy wants credentials; HTTP_PROXY has none: {self.advice('HTTP_PROXY')}",
        )
        self.assertEqual(self.proxy.lines, [f"GET {url}/datasets HTTP/1.1"])
        self.assertEqual(self.requests, [])

    def test_wrong_credentials_over_plain_http(self) -> None:
        os.environ["HTTP_PROXY"] = self.proxy_url("wrong" + self.PASSWORD)
        error = self.refused(self.server.url + "/api")
        self.assertIn(
            "407 Proxy Authentication Required: the proxy refused the credentials in HTTP_PROXY:",
            str(error),
        )
        self.assertEqual(
            self.proxy.proxy_authorizations, [self.basic("wrong" + self.PASSWORD)], "sent once"
        )
        self.assertEqual(self.requests, [])

    def test_wrong_credentials_with_a_slash_in_the_password_are_said_sent(self) -> None:
        # Review 39: "sent" was an "@" in urlsplit's netloc, which ends at the password's "/".
        os.environ["HTTP_PROXY"] = f"http://alice:wrong/{self.PASSWORD}@{self.where}"
        error = self.refused(self.server.url + "/api")
        self.assertIn("the proxy refused the credentials in HTTP_PROXY:", str(error))
        self.assertEqual(self.proxy.proxy_authorizations, [self.basic(f"wrong/{self.PASSWORD}")])
        self.assertEqual(self.requests, [])

    def test_missing_and_wrong_credentials_through_connect(self) -> None:
        tls = self.start_server(server_tls_context())
        url = tls.url + "/api"
        context = ssl.create_default_context(cafile=CA_FILE)
        os.environ["HTTPS_PROXY"] = self.proxy_url(None)
        error = self.refused(url, ssl_context=context)
        self.assertEqual(
            str(error),
            f"GET {url}/datasets via proxy {self.where} (NO_PROXY bypasses it): 407 Proxy Authentication Required:"
            f" the proxy wants credentials; HTTPS_PROXY has none: {self.advice('HTTPS_PROXY')}",
        )
        self.assertRegex(
            self.proxy.lines[0], rf"^CONNECT 127\.0\.0\.1:{tls.server_port} HTTP/1\.[01]$"
        )
        self.proxy.lines.clear()
        os.environ["HTTPS_PROXY"] = self.proxy_url(self.PASSWORD + "x")
        error = self.refused(url, ssl_context=context)
        self.assertIn(
            "the proxy refused the credentials in HTTPS_PROXY: set HTTPS_PROXY=http://USER:",
            str(error),
        )
        self.assertEqual(
            self.proxy.proxy_authorizations,
            [None, self.basic(self.PASSWORD + "x")],
            "each sent once",
        )
        self.assertEqual(tls.requests, [])

    def test_a_connect_refused_with_401_is_the_same_error(self) -> None:
        tls = self.start_server(server_tls_context())
        self.proxy.refusal = b"401 Unauthorized"  # what tinyproxy 1.11 answers to wrong credentials
        os.environ["HTTPS_PROXY"] = self.proxy_url("wrong")
        error = self.refused(
            tls.url + "/api", ssl_context=ssl.create_default_context(cafile=CA_FILE)
        )
        self.assertIn(
            ": 401 Unauthorized: the proxy refused the credentials in HTTPS_PROXY: set HTTPS_PROXY=",
            str(error),
        )
        self.assertEqual(self.proxy.proxy_authorizations, [self.basic("wrong")])

    def test_right_credentials_over_plain_http_and_through_connect(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tunnel": True})
        self.script(reply(body=["plain"]))
        os.environ["HTTP_PROXY"] = os.environ["HTTPS_PROXY"] = self.proxy_url(self.PASSWORD)
        self.assertEqual(self.client().list_datasets(), ["plain"])
        context = ssl.create_default_context(cafile=CA_FILE)
        self.assertEqual(
            self.client(tls.url + "/api", ssl_context=context).list_datasets(), {"tunnel": True}
        )
        self.assertEqual(self.proxy.proxy_authorizations, [self.proxy.required] * 2)
        self.assertRegex(
            self.proxy.lines[1], rf"^CONNECT 127\.0\.0\.1:{tls.server_port} HTTP/1\.[01]$"
        )
        for request in (*self.requests, *tls.requests):
            self.assertNotIn("Proxy-Authorization", request.headers)
            self.assertEqual(request.headers["Authorization"], f"Bearer {KEY}")


class CertificateTrustTests(ServerTestCase):
    """What the default TLS context trusts (as requests does), and what a verification failure says."""

    def setUp(self) -> None:
        super().setUp()
        for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            os.environ.pop(name, None)
        self.tls = self.start_server(server_tls_context())
        self.tls.default = reply(body={"tls": True})

    def assert_trusted(self, **options: object) -> None:
        self.assertEqual(
            self.client(self.tls.url + "/api", **options).list_datasets(), {"tls": True}
        )
        self.assertEqual(self.tls.requests[-1].path, "/api/datasets")

    def refusal(self, url: str | None = None, **options: object) -> str:
        with self.assertRaises(dc.NetworkError) as caught:
            self.client(url or self.tls.url + "/api", max_retries=2, **options).list_datasets()
        self.assertEqual(caught.exception.attempts, 1)
        self.assertEqual(self.tls.requests, [])
        return str(caught.exception)

    def test_requests_ca_bundle_file_is_trusted(self) -> None:
        os.environ["REQUESTS_CA_BUNDLE"] = CA_FILE
        self.assert_trusted()
        self.assertEqual(self.tls.requests[0].headers["Authorization"], f"Bearer {KEY}")

    def test_curl_ca_bundle_hashed_directory_is_trusted(self) -> None:
        os.environ["CURL_CA_BUNDLE"] = str(self.hashed_directory())
        self.assert_trusted()

    def test_requests_ca_bundle_wins_over_curl_ca_bundle(self) -> None:
        os.environ["REQUESTS_CA_BUNDLE"] = CA_FILE
        os.environ["CURL_CA_BUNDLE"] = str(
            self.tmp() / "missing.pem"
        )  # not read: requests reads one of the two
        self.assert_trusted()

    def test_bundle_is_added_to_the_system_store(self) -> None:
        system = len(ssl.create_default_context().get_ca_certs())
        os.environ["REQUESTS_CA_BUNDLE"] = CA_FILE
        certificates = dc._default_ssl_context().get_ca_certs()
        self.assertEqual(len(certificates), system + 1)
        self.assertIn(
            ((("commonName", "dataset-client test CA"),),), [c["subject"] for c in certificates]
        )

    def test_missing_bundle_is_an_error_naming_the_variable(self) -> None:
        missing = str(self.tmp() / "corp-ca.pem")
        for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            with self.subTest(variable=variable), mock.patch.dict(os.environ, {variable: missing}):
                with self.assertRaises(ValueError) as caught:
                    self.client(self.tls.url + "/api").list_datasets()
                self.assertEqual(
                    str(caught.exception),
                    f"{variable} names {missing}, which is not a file or directory of PEM CA certificates:"
                    " No such file or directory",
                )
        self.assertEqual(self.tls.requests, [])
        self.assertEqual(self.tls.connections, 0)

    def test_failure_says_what_was_trusted_and_how_to_add_a_ca(self) -> None:
        empty = self.tmp()
        os.environ["REQUESTS_CA_BUNDLE"] = str(empty)
        message = self.refusal()
        paths = ssl.get_default_verify_paths()
        store = ", ".join(path for path in (paths.cafile, paths.capath) if path) or "none found"
        self.assertEqual(
            message,
            f"GET {self.tls.url}/api/datasets: TLS certificate verification failed: unable to get local issuer"
            f" certificate; trusted: the system's CA store ({store}), {empty} from REQUESTS_CA_BUNDLE; to trust"
            " another CA: REQUESTS_CA_BUNDLE=FILE (added to the system store) or SSL_CERT_FILE=FILE (in place of"
            " its file), ca_bundle=FILE or ssl_context= in code",
        )
        os.environ["SSL_CERT_FILE"] = str(ROOT / "README.md")  # no CA in it
        self.assertIn(
            f"trusted: the system's CA store ({ROOT / 'README.md'} from SSL_CERT_FILE",
            self.refusal(),
        )

    def test_a_context_made_for_a_ca_bundle_names_it_by_the_librarys_keyword(self) -> None:
        missing = str(self.tmp() / "corp.pem")
        with self.assertRaisesRegex(
            FileNotFoundError, f"^ca_bundle names {re.escape(missing)}, which is not a file"
        ):
            dc._default_ssl_context(missing)
        self.assert_trusted(ssl_context=dc._default_ssl_context(CA_FILE))
        self.tls.requests.clear()
        empty = self.tmp()
        message = self.refusal(ssl_context=dc._default_ssl_context(str(empty)))
        self.assertIn(
            f"), {empty} from ca_bundle; to trust another CA: REQUESTS_CA_BUNDLE=FILE", message
        )

    def use_no_system_store(self) -> None:
        os.environ["SSL_CERT_FILE"] = str(self.tmp() / "none.pem")  # the test CA alone, and faster
        os.environ["SSL_CERT_DIR"] = str(self.tmp())

    def test_a_relative_ca_bundle_is_made_absolute_once_a_later_chdir_changes_nothing(self) -> None:
        # Found in review3: OpenSSL looks a hashed directory up at each handshake, so a relative one
        # followed the process's working directory (another user's CA under the same name, trusted).
        self.use_no_system_store()
        here, elsewhere = self.tmp(), self.tmp()
        shutil.copy(CA_FILE, here / "corp.pem")
        shutil.copytree(self.hashed_directory(), here / "corp.d")
        (elsewhere / "corp.d").mkdir()  # what is there once the process has moved: no CA
        (elsewhere / "corp.pem").write_text("not a certificate\n")
        for name in ("corp.pem", "corp.d"):
            with self.subTest(bundle=name):
                with contextlib.chdir(here):
                    client = self.client(self.tls.url + "/api", ca_bundle=name)
                with contextlib.chdir(elsewhere):
                    self.assertEqual(client.list_datasets(), {"tls": True})
                    self.assertEqual(client._arguments["ca_bundle"], str(here / name))
                    trusted = dc._trusted_by_default[client._pool._ssl_context]
                    self.assertTrue(trusted.endswith(f", {here / name} from ca_bundle"), trusted)
        self.assertEqual(len(self.tls.requests), 2)

    def test_a_bundle_others_can_write_is_a_warning_naming_it(self) -> None:
        self.use_no_system_store()
        bundle, directory = self.tmp() / "corp.pem", self.hashed_directory()
        shutil.copy(CA_FILE, bundle)
        modes = ((bundle, 0o664), (bundle, 0o646), (directory, 0o777), (directory, 0o1777))
        for path, mode in modes:
            with self.subTest(path=path.name, mode=oct(mode)):
                path.chmod(mode)
                with self.assertLogs("dataset_client", level="WARNING") as logs:
                    self.assert_trusted(ca_bundle=path)
                self.assertEqual(
                    [record.getMessage() for record in logs.records],
                    [
                        f"ca_bundle {path} is writable by group or others, who could have any server"
                        " trusted (chmod go-w)"
                    ],
                )
                self.assertTrue(logs.records[0].lasting, "the CLI shows it whole")
                path.chmod(0o755 if path.is_dir() else 0o644)
                with self.assertNoLogs("dataset_client", level="WARNING"):
                    self.assert_trusted(ca_bundle=path)
        os.environ["REQUESTS_CA_BUNDLE"] = str(bundle)
        bundle.chmod(0o666)
        with self.assertLogs("dataset_client", level="WARNING") as logs:
            self.assert_trusted()
        named = logs.records[0].getMessage().partition(" is ")[0]
        self.assertEqual(named, f"REQUESTS_CA_BUNDLE {bundle}")

    def test_a_bundle_another_user_owns_is_a_warning_naming_it(self) -> None:
        # Found in review: a teammate renamed their CA over the user's 0644 bundle in a 2775 team
        # directory; trusted without a word, it sent the key to their server.
        self.use_no_system_store()
        bundle = self.tmp() / "corp.pem"
        shutil.copy(CA_FILE, bundle)
        me = owner = os.geteuid()
        theirs: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if me == 0:
            os.chown(bundle, owner := 4243, 4243)
        else:  # this user, seen as another one
            theirs = mock.patch.object(dc.os, "geteuid", return_value=me + 1)
        with theirs, self.assertLogs("dataset_client", level="WARNING") as logs:
            self.assert_trusted(ca_bundle=bundle)
        said = f"ca_bundle {bundle} is owned by another user (uid {owner}), who could have any"
        self.assertEqual([r.getMessage() for r in logs.records], [said + " server trusted"])
        os.chown(bundle, me, -1)  # the user's own (root's, as root): no word
        with self.assertNoLogs("dataset_client", level="WARNING"):
            self.assert_trusted(ca_bundle=bundle)

    def test_a_bundle_that_is_no_regular_file_or_directory_is_refused_before_any_read(self) -> None:
        # Found in review3: a FIFO held the constructor 6 s past deadline=1 (until a writer came).
        fifo, reads = self.tmp() / "ca.pem", list[bytes]()
        os.mkfifo(fifo)
        writer = os.open(fifo, os.O_RDWR)  # a writer there, writing nothing yet: a reader waits
        read, write = os.pipe()  # as bash's <(cat ca.pem) gives it
        self.addCleanup(os.close, read)
        with open(write, "wb") as writing:
            writing.write(Path(CA_FILE).read_bytes())
        reason = "which is not a file or directory of PEM CA certificates: a FIFO, device or socket"
        reason += " is never read"
        for path in (str(fifo), f"/dev/fd/{read}", "/dev/zero"):
            outcome = list[BaseException]()

            def make(path: str = path, outcome: list[BaseException] = outcome) -> None:
                try:
                    DatasetClient(self.tls.url, KEY, ca_bundle=path, deadline=1)
                except OSError as exc:
                    outcome.append(exc)

            with self.subTest(path=path):
                making = threading.Thread(target=make, daemon=True)
                making.start()
                making.join(2)  # the deadline and a second
                if making.is_alive():  # let it go: the writer gone is its end of file
                    os.close(writer)
                    writer = os.open(fifo, os.O_RDWR)
                    making.join(5)
                refused = [(OSError, f"ca_bundle names {path}, {reason}")]
                self.assertEqual([(type(error), str(error)) for error in outcome], refused)
        reads.append(os.read(read, 10))
        os.close(writer)
        self.assertEqual(reads, [Path(CA_FILE).read_bytes()[:10]], "the pipe was left unread")
        os.environ["CURL_CA_BUNDLE"] = str(fifo)
        with self.assertRaises(ValueError) as caught:
            self.client(self.tls.url).list_datasets()
        self.assertEqual(str(caught.exception), f"CURL_CA_BUNDLE names {fifo}, {reason}")
        self.assertEqual((self.tls.requests, self.tls.connections), ([], 0))

    def test_given_context_is_used_exactly_as_given(self) -> None:
        os.environ["REQUESTS_CA_BUNDLE"] = str(
            self.tmp() / "missing.pem"
        )  # would be an error if it were read
        context = ssl.create_default_context(cafile=CA_FILE)
        flags = context.verify_flags
        self.assert_trusted(ssl_context=context)
        self.assertEqual(context.verify_flags, flags)
        self.tls.requests.clear()
        message = self.refusal(ssl_context=ssl.create_default_context())
        self.assertTrue(
            message.endswith(
                "unable to get local issuer certificate; trusted: the ssl_context given, as given"
                " (add a CA with its load_verify_locations(FILE))"
            ),
            message,
        )

    def test_lenient_ca_is_accepted_and_names_and_unknown_cas_are_still_refused(self) -> None:
        if shutil.which("openssl") is None:
            self.skipTest(
                "openssl is not installed: it makes the CA with a basicConstraints not marked critical"
            )
        ca, chain = make_lenient_ca(self.tmp())
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(chain)
        self.tls = self.start_server(server_context)
        self.tls.default = reply(body={"tls": True})
        os.environ["SSL_CERT_FILE"] = ca
        self.assert_trusted()  # Python 3.13+'s default context (VERIFY_X509_STRICT) refuses this CA
        os.environ["REQUESTS_CA_BUNDLE"] = ca
        self.assert_trusted()
        self.tls.requests.clear()
        wrong_name = (
            f"https://localhost:{self.tls.server_port}/api"  # the certificate is for 127.0.0.1 only
        )
        self.assertRegex(
            self.refusal(wrong_name),
            r"verification failed: Hostname mismatch, [^;]*'localhost'\.?$",
        )
        os.environ.pop("SSL_CERT_FILE")
        os.environ.pop("REQUESTS_CA_BUNDLE")
        self.assertIn(
            "unable to get local issuer certificate; trusted: the system's CA store", self.refusal()
        )
        strict = ssl.create_default_context(cafile=ca)
        strict.verify_flags |= (
            ssl.VERIFY_X509_STRICT
        )  # a caller's own context keeps what it asks for
        self.assertIn("TLS certificate verification failed", self.refusal(ssl_context=strict))


class CABundleTests(ServerTestCase):
    """ca_bundle: a file or a hashed directory, read at construction, kept across pickling."""

    def use_an_empty_system_store(self) -> None:
        """No CA but the test's (and no 0.2 s a context spent loading the system's hundreds)."""
        for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            os.environ.pop(name, None)
        os.environ["SSL_CERT_FILE"] = str(self.tmp() / "none.pem")
        os.environ["SSL_CERT_DIR"] = str(self.tmp())

    def test_ca_bundle_trusts_its_file_or_directory_and_survives_pickling(self) -> None:
        self.use_an_empty_system_store()
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        with self.assertRaises(dc.NetworkError):  # the test CA is in no store but the bundle
            self.client(tls.url, max_retries=0).list_datasets()
        bundles = [CA_FILE, Path(CA_FILE)]
        if shutil.which("openssl"):
            bundles.append(self.hashed_directory())
        for bundle in bundles:
            with self.subTest(bundle=bundle):
                client = self.client(tls.url, ca_bundle=bundle)
                self.assertEqual(client.list_datasets(), {"tls": True})
                unpickled = pickle.loads(pickle.dumps(client))
                self.addCleanup(unpickled.close)
                self.assertEqual(unpickled.list_datasets(), {"tls": True})
        self.assertEqual([r.path for r in tls.requests], ["/datasets"] * 2 * len(bundles))

    def test_a_client_unpickled_without_its_ca_bundle_fails_at_its_first_request(self) -> None:
        # Found in review3: unpickling ran the constructor, so a worker without the bundle raised in
        # pickle.loads; Dask's worker logged the pickle (key included) and left the cluster.
        self.use_an_empty_system_store()
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        bundle = self.tmp() / "corp.pem"
        shutil.copy(CA_FILE, bundle)
        pickled = pickle.dumps(self.client(tls.url, ca_bundle=bundle))
        bundle.rename(bundle.with_suffix(".away"))  # as a worker without it sees it
        unpickled = pickle.loads(pickled)
        self.addCleanup(unpickled.close)
        passed_on = pickle.loads(pickle.dumps(unpickled))  # to another worker: still named
        self.addCleanup(passed_on.close)
        named = f"^ca_bundle names {re.escape(str(bundle))}, which is not a file or directory of"
        for client in (unpickled, passed_on):
            with self.assertRaisesRegex(FileNotFoundError, named):
                client.list_datasets()
        self.assertEqual((tls.requests, tls.connections), ([], 0))
        bundle.with_suffix(".away").rename(bundle)
        self.assertEqual(unpickled.list_datasets(), {"tls": True}, "read once it is there")
        self.assertEqual(passed_on.list_datasets(), {"tls": True})
        self.assertEqual([r.headers["Authorization"] for r in tls.requests], [f"Bearer {KEY}"] * 2)
        missing = self.tmp() / "missing.pem"
        with self.assertRaisesRegex(FileNotFoundError, re.escape(f"ca_bundle names {missing},")):
            DatasetClient(tls.url, KEY, ca_bundle=missing)  # made here: at construction

    def test_an_unreadable_ca_bundle_is_its_readers_error_at_construction_naming_it(self) -> None:
        self.use_an_empty_system_store()
        missing, not_pem = self.tmp() / "corp.pem", self.tmp() / "notes.txt"
        not_pem.write_text("no certificate here\n")
        with self.assertRaisesRegex(
            FileNotFoundError, f"^ca_bundle names {re.escape(str(missing))}, which is not a"
        ):
            DatasetClient(self.server.url, KEY, ca_bundle=missing)
        with self.assertRaisesRegex(
            ssl.SSLError, f"^ca_bundle names {re.escape(str(not_pem))}, which is not a"
        ):
            DatasetClient(self.server.url, KEY, ca_bundle=str(not_pem))
        with self.assertRaisesRegex(
            FileNotFoundError, "^ca_bundle is empty: name a file or directory of PEM CA"
        ):
            DatasetClient(self.server.url, KEY, ca_bundle="")
        with self.assertRaisesRegex(
            TypeError, r"^ca_bundle must be a path \(str or os.PathLike\), not bytes$"
        ):
            DatasetClient(self.server.url, KEY, ca_bundle=CA_FILE.encode())  # type: ignore[arg-type]
        with self.assertRaisesRegex(ValueError, "^ca_bundle and ssl_context cannot both be given"):
            DatasetClient(
                self.server.url, KEY, ca_bundle=CA_FILE, ssl_context=ssl.create_default_context()
            )
        self.assertEqual(self.requests, [])

    def test_a_relative_ca_bundle_is_found_by_a_copy_unpickled_in_another_directory(self) -> None:
        self.use_an_empty_system_store()
        here, elsewhere = self.tmp(), self.tmp()
        shutil.copy(CA_FILE, here / "corp.pem")
        tls = self.start_server(server_tls_context())
        tls.default = reply(body={"tls": True})
        with contextlib.chdir(here):
            client = self.client(tls.url, ca_bundle="corp.pem")
        pickled = pickle.dumps(client)
        with contextlib.chdir(elsewhere):  # a process pool's or Dask's worker, started elsewhere
            unpickled = pickle.loads(pickled)
            self.addCleanup(unpickled.close)
            self.assertEqual(
                unpickled.list_datasets(),
                {"tls": True},
                "the copy trusts the bundle from elsewhere",
            )
        self.assertEqual(
            [r.path for r in tls.requests], ["/datasets"], "the server saw the copy's request"
        )
        self.assertEqual(
            unpickled._pool._ssl_context.cert_store_stats()["x509_ca"], 1, "the test CA alone"
        )
        self.assertTrue(os.path.isabs(unpickled._arguments["ca_bundle"]))
        self.assertTrue(os.path.samefile(unpickled._arguments["ca_bundle"], here / "corp.pem"))


class SchemeProbeTests(ServerTestCase):
    """A wrong scheme (https:// to a plain server, http:// to a TLS one) is found by one probe,
    never by sending the request again; the probe is bounded, and runs once per origin.
    """

    def test_https_to_a_plain_http_server_says_so_and_is_not_retried(self) -> None:
        trust_the_test_ca_alone()  # the store need not be the system's: no handshake gets that far
        self.server.default = reply(body=[])
        url = self.server.url.replace("http://", "https://")
        with self.assertRaises(dc.NetworkError) as caught:  # the probe spends the back-off
            self.client(url + "/api/v1", max_retries=2, backoff_factor=0.5).list_datasets()
        port = self.server.server_port
        self.assertEqual(
            str(caught.exception),
            f"GET https://127.0.0.1:{port}/api/v1/datasets: the server answered in plain HTTP, not HTTPS (TLS):"
            f" use http://127.0.0.1:{port}/api/v1/datasets instead",
        )
        self.assertEqual(caught.exception.attempts, 1)
        self.assertEqual(
            self.server.connections, 2, "the handshake, then one probe; never the request again"
        )
        self.assertEqual(self.requests, [], "the probe (OPTIONS *) is no request of the service's")
        copy = pickle.loads(pickle.dumps(caught.exception))
        self.assertEqual((type(copy), str(copy)), (type(caught.exception), str(caught.exception)))
        status, err = self.run_cli("--base-url", url, "--retries", "2", "datasets")
        self.assertEqual(status, 3)
        self.assertIn(
            f": the server answered in plain HTTP, not HTTPS (TLS): use http://127.0.0.1:{port}/datasets",
            err,
        )
        self.assertEqual(self.server.connections, 4, "the command line: one more of each")

    def test_http_to_a_tls_server_says_so_and_is_not_retried(self) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body=[])
        url = tls.url.replace("https://", "http://")
        with self.assertRaises(dc.NetworkError) as caught:
            self.client(url + "/api/v1", max_retries=2).create_export(
                "daily_bars", symbols="AAPL", start_date="2024-01-02", end_date="2024-01-05"
            )
        port = tls.server_port
        self.assertEqual(
            str(caught.exception),
            f"POST http://127.0.0.1:{port}/api/v1/exports: the server answered in HTTPS (TLS), not plain HTTP:"
            f" use https://127.0.0.1:{port}/api/v1/exports instead",
        )
        self.assertEqual(caught.exception.attempts, 1)
        self.assertEqual(tls.connections, 2, "the request's, then a handshake that sends nothing")
        self.assertEqual(tls.requests, [])

    def test_a_tls_server_refusing_the_handshake_is_no_wrong_scheme(self) -> None:
        # nginx on its TLS port: a handshake it refuses gets an alert, plain HTTP gets "HTTP/1.1 400".
        trust_the_test_ca_alone()  # the handshake fails before any certificate
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        listener.settimeout(5)
        received: list[bytes] = []

        def serve() -> None:
            with contextlib.suppress(OSError):
                for _ in range(3):
                    connection, _ = listener.accept()
                    with connection:
                        received.append(connection.recv(65536)[:1])
                        if (
                            received[-1] == b"\x16"
                        ):  # a ClientHello: a fatal handshake_failure alert
                            connection.sendall(b"\x15\x03\x03\x00\x02\x02\x28")
                        else:
                            connection.sendall(
                                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
                            )

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        url = f"https://127.0.0.1:{listener.getsockname()[1]}"
        with self.assertRaises(dc.NetworkError) as caught:
            self.client(url, max_retries=2).list_datasets()
        thread.join(5)
        self.assertNotIsInstance(caught.exception, dc._WrongSchemeError)
        self.assertIn(
            f"GET {url}/datasets: could not connect: [SSL: SSLV3_ALERT_HANDSHAKE_FAILURE]",
            str(caught.exception),
        )
        self.assertEqual(caught.exception.attempts, 3, "retried as any failed handshake")
        self.assertEqual(received, [b"\x16"] * 3, "three handshakes, no probe in plain HTTP")

    def test_the_plain_http_probe_is_bounded_as_a_whole_not_per_byte(self) -> None:
        # Found in review2: "HTTP/" a byte at a time, each just within the time-out, made the probe last
        # five time-outs, past the call's deadline. The socket and clock are stand-ins: no time passes.
        now = [0.0]

        class Trickling:  # each byte arrives 0.4 time-outs after the one before
            def __init__(self) -> None:
                self.sent, self.waits, self.timeout = b"", 0, 1.0

            def __enter__(self) -> Trickling:
                return self

            def __exit__(self, *exc_info: object) -> None:
                pass

            def sendall(self, data: bytes) -> None:
                self.sent += data

            def settimeout(self, timeout: float) -> None:
                self.timeout = timeout

            def recv(self, size: int) -> bytes:
                self.waits += 1
                if self.timeout < 0.4:
                    raise TimeoutError("timed out")
                now[0] += 0.4
                return b"HTTP/"[self.waits - 1 : self.waits]

        sock = Trickling()
        with (
            mock.patch.object(dc, "_connect_within", return_value=sock),
            mock.patch.object(
                dc, "time", mock.Mock(monotonic=lambda: now[0])
            ),  # this module's clock alone
            self.assertRaises(TimeoutError),
        ):
            dc._speaks_plain_http("127.0.0.1", 443, 1.0, lambda sock: None)
        self.assertEqual(sock.sent, b"OPTIONS * HTTP/1.0\r\n\r\n")
        self.assertEqual(
            sock.waits, 3, "two bytes in time, the third past the probe's one time-out"
        )

    def test_a_plain_server_that_hangs_up_on_a_first_request_costs_only_the_back_off(self) -> None:
        # Issue 30: a 503-then-200 call took 5.4 s, not 0.4 s: the probe's ClientHello, which has no
        # blank line, held by a server waiting for a request's head, for 5 s before the retry.
        url, seen = head_server(self, hang_up, answer(503), answer(200, b'["ok"]'))
        started = time.monotonic()
        self.assertEqual(self.client(url, backoff_factor=0.1).list_datasets(), ["ok"])
        elapsed = time.monotonic() - started
        self.assertEqual([line for line in seen if line != "TLS"], ["GET /datasets HTTP/1.1"] * 3)
        self.assertLessEqual(seen.count("TLS"), 1, "one probe at most: the origin never answered")
        self.assertLess(elapsed, 0.1 + 0.2 + 1, "the probe spends the back-off (0.3 s at most)")

    def test_the_scheme_probe_ends_by_the_deadline(self) -> None:
        # Issue 30: deadline=3 ended at 5.8 s, the probe waiting min(timeout, 5 s) after a hang-up.
        def late_hang_up(head: str, connection: socket.socket) -> bool:
            time.sleep(0.3)
            return False

        url, seen = head_server(self, late_hang_up)
        probes, speaks_tls = [], dc._speaks_tls

        def recorded(host: str, port: int, timeout: float, hold: Any) -> bool:
            probes.append(time.monotonic() + timeout)  # when its wait would end
            return speaks_tls(host, port, timeout, hold)

        started = time.monotonic()
        with mock.patch.object(dc, "_speaks_tls", recorded):
            error = outcome_of(self.client(url, deadline=0.5, max_retries=0).list_datasets)
        self.assertIsInstance(error, dc.RequestTimeoutError)
        self.assertRegex(str(error), r"^GET \S+/datasets: the deadline of 0\.5 s was reached")
        self.assertEqual(len(probes), 1)
        self.assertLessEqual(probes[0], started + 0.5 + 0.05, "its wait ends by the deadline")
        self.assertLess(time.monotonic() - started, 0.5 + 1)
        self.assertEqual(seen, ["GET /datasets HTTP/1.1", "TLS"])
        # A back-off past the deadline is not waited for: nor is it spent probing.
        url, seen = head_server(self, hang_up)
        started = time.monotonic()
        client = self.client(url, deadline=1, backoff_factor=10)
        self.assertIsInstance(outcome_of(client.list_datasets), dc.RequestTimeoutError)
        self.assertLess(time.monotonic() - started, 0.5, "at once")
        self.assertEqual(seen, ["GET /datasets HTTP/1.1"])

    def test_the_scheme_probe_runs_once_per_origin_and_never_once_it_answered(self) -> None:
        url, seen = head_server(self, hang_up, hang_up, answer(200), refuse_tls=True)
        self.assertEqual(self.client(url, backoff_factor=0.1).list_datasets(), [])
        request = "GET /datasets HTTP/1.1"
        self.assertEqual(seen, [request, "TLS", request, request])
        # An origin that answered in its scheme: a later new connection's hang-up is a plain retry.
        closing = answer(200, headers="Connection: close\r\n")
        url, seen = head_server(self, closing, hang_up, answer(200))
        client = self.client(url, backoff_factor=0.1)
        self.assertEqual((client.list_datasets(), client.list_datasets()), ([], []))
        self.assertEqual(seen, [request] * 3, "no probe")

    def test_a_failing_part_or_ctrl_c_starts_no_probe(self) -> None:
        # Issue 30: the parts whose connections a failing part (or Ctrl-C) shut probed for 5 s.
        for raised in (RuntimeError("the progress callback failed"), KeyboardInterrupt()):
            with self.subTest(raised=type(raised).__name__):
                self.stop_a_parallel_download(raised)

    def stop_a_parallel_download(self, raised: BaseException) -> None:
        """A download on two connections whose first part raises ``raised`` (from its progress
        callback) while the second part's request waits for its answer."""
        ranged = threading.Event()

        def whole(head: str, connection: socket.socket) -> bool:
            fields = f'Content-Length: {4 * 1024 * 1024}\r\nAccept-Ranges: bytes\r\nETag: "v1"\r\n'
            connection.sendall(f"HTTP/1.1 200 OK\r\n{fields}\r\n".encode())
            ranged.wait(5)
            connection.sendall(bytes(1024 * 1024))  # a chunk: the progress callback is called
            return hold(head, connection)

        def part(head: str, connection: socket.socket) -> bool:
            ranged.set()
            return hold(head, connection)

        def progress(done: int, total: int | None) -> None:
            if done:
                raise raised

        url, seen = head_server(self, whole, part)
        out = self.tmp() / "out.bin"
        started = time.monotonic()
        client = self.client()
        url += "/f"
        error = outcome_of(lambda: client.download(url, out, connections=2, progress=progress))
        self.assertIs(error, raised)
        self.assertLess(time.monotonic() - started, 2, "the part stopped at once")
        self.assertEqual(seen, ["GET /f HTTP/1.1"] * 2, "no probe")
        self.assertEqual(list(out.parent.iterdir()), [])
