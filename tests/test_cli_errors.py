"""What the command line says when something fails: error lines in its own terms, hints, exit
statuses.
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import json
import os
import pickle
import re
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from tests.support import (
    CA_FILE,
    KEY,
    ScriptedCommandLineTestCase,
    StandInTestCase,
    assert_usage_errors,
    file_size_limit,
    free_port,
    reply,
    server_tls_context,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class ErrorMessageTests(StandInTestCase):
    """One line in the command line's own terms, saying what to do; the exit status."""

    def test_errors_speak_in_the_command_lines_own_terms(self) -> None:
        base = self.server.url + "/api"
        self.script(reply(429, {"message": "slow down"}, {"Retry-After": "120"}))
        cases = [
            (
                ["--base-url", "ftp://x/api", "datasets"],
                {},
                2,
                "--base-url must be an http:// or https:// URL, not 'ftp'",
            ),
            (
                ["datasets"],
                {"DATASET_CLIENT_API_KEY": "two words"},
                2,
                "DATASET_CLIENT_API_KEY contains whitespace or a control character (CR, LF, ...)",
            ),
            (
                ["export", "d", "--symbols", "A", "--start", "2024-02-01", "--end", "2024-01-01"],
                {},
                2,
                "--start 2024-02-01 is after --end 2024-01-01",
            ),
            (
                ["--base-url", base, "datasets"],
                {},
                1,
                "429 Too Many Requests: GET " + base + "/datasets: slow down; try again in 2:00",
            ),
        ]
        for argv, environment, expected, text in cases:
            with self.subTest(argv=argv):
                status, out, err = self.run_main(
                    *argv, key=environment.get("DATASET_CLIENT_API_KEY", "stand-in-key")
                )
                self.assertEqual((status, out), (expected, ""))
                self.assertEqual(err, f"dataset-client: error: {text}\n")

    def test_a_bad_base_url_is_named_where_it_came_from_in_the_command_lines_words(self) -> None:
        # The fourth review's second pass (low 9): the wording went wrong in three lines, as the
        # messages became the library's: the key's name, a profile not named, a URL's host.
        config = self.tmp() / "config.toml"
        config.write_text('[default]\nbase_url = "ftp://h"\n')
        config.chmod(0o600)
        userinfo = "--base-url must not contain a user:password part"
        cases = [
            (
                ["--base-url", "http://u:pw@h", "datasets"],
                {},
                f"{userinfo} (pass DATASET_CLIENT_API_KEY or headers instead)",
            ),
            (
                ["datasets"],
                {"DATASET_CLIENT_BASE_URL": "ftp://h"},
                "DATASET_CLIENT_BASE_URL must be an http:// or https:// URL, not 'ftp'",
            ),
            (
                ["datasets"],
                {"DATASET_CLIENT_CONFIG": str(config)},
                f"base_url in [default] in {config} must be an http:// or https:// URL, not 'ftp'",
            ),
            (["download", "https:///x?sig=816d0123", "x.csv"], {}, "URL has no host: 'https://'"),
            (
                ["download", "http://h:99999/x", "x.csv"],
                {},
                "URL has an invalid host or port: Port out of range 0-65535",
            ),
            (
                ["download", "https://[::1/x", "x.csv"],
                {},
                "URL has an invalid host or port: Invalid IPv6 URL",
            ),
            (
                ["download", "https://[::1/x", "x.csv"],
                {"DATASET_CLIENT_BASE_URL": "http://h"},
                "URL has an invalid host or port: Invalid IPv6 URL",
            ),
        ]
        for argv, environment, text in cases:
            with self.subTest(argv=argv, environment=environment):
                status, out, err = self.run_main(*argv, environment=environment)
                self.assertEqual((status, out, err), (2, "", f"dataset-client: error: {text}\n"))
        self.assertEqual(self.requests, [])

    def test_errors_say_what_to_do(self) -> None:
        base = self.server.url + "/api"
        self.script(*[reply(401, {"message": "missing or wrong API key"})] * 2)
        status, _, err = self.run_main("datasets", environment={"DATASET_CLIENT_BASE_URL": base})
        self.assertEqual(
            (status, err),
            (
                1,
                f"dataset-client: error: 401 Unauthorized: GET {base}/datasets: missing or wrong API key "
                "(DATASET_CLIENT_API_KEY is not set)\n",
            ),
        )
        self.assertIsNone(self.requests[0].headers.get("Authorization"))
        status, _, err = self.run_main(
            "datasets", environment={"DATASET_CLIENT_BASE_URL": base, "DATASET_CLIENT_API_KEY": KEY}
        )
        self.assertEqual(status, 1)
        self.assertTrue(err.endswith(": missing or wrong API key\n"), err)
        assert_usage_errors(
            self,
            ("datset", "unknown command 'datset': did you mean 'datasets'?"),
            ("--output tabel datasets", "unknown --output value 'tabel': did you mean 'table'?"),
            (
                "export trades --symbols V --start 2024/01/02 --end 2024-01-03",
                "argument --start: invalid date '2024/01/02': use YYYY-MM-DD",
            ),
            (
                "--base-url localhost:8765 datasets",
                "--base-url 'localhost:8765' has no scheme: did you mean 'http://localhost:8765'?",
            ),
            (
                "download /x out --limit-rate 10X",
                "argument --limit-rate: invalid rate '10X': bytes per second, such as 500K, 10M or 1G",
            ),
        )
        self.assertEqual(len(self.requests), 2, "nothing sent for a usage error")

    def test_a_proxy_in_the_way_is_named(self) -> None:
        port = free_port()  # a proxy that is not there
        with mock.patch.dict(
            os.environ, {"HTTP_PROXY": f"http://127.0.0.1:{port}", "NO_PROXY": ""}
        ):
            status, _, err = self.run_main("--retries", "0", "datasets")
        self.assertEqual(status, 3)
        self.assertIn(f"via proxy 127.0.0.1:{port} (NO_PROXY bypasses it): could not connect", err)

    def test_a_full_disk_is_a_one_line_error(self) -> None:
        class FullDisk(io.StringIO):
            def write(self, text: str) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

        for argv in (["datasets"], ["query", "SELECT 1"]):
            err = io.StringIO()
            with (
                mock.patch.dict(
                    os.environ,
                    {
                        "DATASET_CLIENT_BASE_URL": self.base_url,
                        "DATASET_CLIENT_API_KEY": "stand-in-key",
                    },
                ),
                contextlib.redirect_stdout(FullDisk()),
                contextlib.redirect_stderr(err),
            ):
                status = cli.main(argv)
            self.assertEqual(status, 1)
            self.assertEqual(
                err.getvalue(),
                "dataset-client: error: cannot write stdout: No space left on device\n",
            )
        self.script(reply(200, b"x" * 1000, {"ETag": '"v1"'}))
        with file_size_limit(100):
            status, _, err = self.run_main(
                "download", self.server.url + "/f", str(self.tmp() / "f")
            )
        self.assertEqual(status, 1)
        self.assertRegex(err, r"^dataset-client: error: cannot write .*/f: File too large\n$")

    def test_a_certificate_failure_names_ca_bundle_which_works_from_the_option_and_the_profile(
        self,
    ) -> None:
        tls = self.start_server(server_tls_context())
        tls.default = reply(body=[])
        environment = {"DATASET_CLIENT_BASE_URL": tls.url + "/api"}
        status, _, err = self.run_main("--retries", "0", "datasets", environment=environment)
        self.assertEqual(status, 3)
        self.assertIn(": TLS certificate verification failed: ", err)
        self.assertTrue(
            err.endswith(
                "; if a private CA or a proxy signs it, pass --ca-bundle FILE or set SSL_CERT_FILE\n"
            ),
            err,
        )
        status, out, err = self.run_main(
            "--ca-bundle", CA_FILE, "datasets", environment=environment
        )
        self.assertEqual((status, json.loads(out)), (0, []), err)
        config = self.tmp() / "config.toml"
        config.write_text(f'[default]\nca_bundle = "{CA_FILE}"\n')
        # Whatever the umask of who runs the tests: a config file others may write is refused.
        config.chmod(0o600)
        status, out, err = self.run_main(
            "datasets", environment={**environment, "DATASET_CLIENT_CONFIG": str(config)}
        )
        self.assertEqual((status, json.loads(out)), (0, []), err)
        status, _, err = self.run_main(
            "--ca-bundle", str(config), "datasets", environment=environment
        )
        self.assertEqual(status, 2)
        self.assertIn(
            f"--ca-bundle names {config}, which is not a file or directory of PEM CA certificates",
            err,
        )

    def test_the_certificate_advice_follows_the_errors_certificate_field_not_its_words(
        self,
    ) -> None:
        advice = "; if a private CA or a proxy signs it, pass --ca-bundle FILE or set SSL_CERT_FILE"
        failed = dc.NetworkError("GET https://h/x: TLS handshake failed", certificate=True)
        self.assertEqual(cli._error_text(failed), "GET https://h/x: TLS handshake failed" + advice)
        self.assertEqual(cli._error_text(pickle.loads(pickle.dumps(failed))), str(failed) + advice)
        other = dc.NetworkError(
            "GET https://h/x: connection lost: the certificate verifier went away"
        )
        self.assertEqual(cli._error_text(other), str(other))

    def test_no_such_dataset_names_a_few(self) -> None:
        listing = [{"name": f"dataset_{number:04d}_" + "x" * 200} for number in range(2000)]
        self.script(reply(body=listing))
        environment = {"DATASET_CLIENT_BASE_URL": self.server.url}
        status, out, err = self.run_main("datasets", "nothing_like_it", environment=environment)
        self.assertEqual((status, out, err.count("\n")), (1, "", 1), err[:300])
        self.assertRegex(
            err, r"^dataset-client: error: no dataset 'nothing_like_it'; the datasets: "
        )
        self.assertIn("dataset_0000_", err)
        self.assertLess(len(err), 400)
        self.assertIn("2000 in all", err)

    def test_exit_statuses_and_streams_of_the_process(self) -> None:
        ok = self.run_process("datasets")
        self.assertEqual((ok.returncode, ok.stderr), (0, b""))
        self.assertEqual(json.loads(ok.stdout)[1]["name"], "trades")
        secret = "sk-live-NEVER-PRINT-ME"
        denied = self.run_process("datasets", key=secret)
        self.assertEqual((denied.returncode, denied.stdout), (1, b""))
        self.assertRegex(
            denied.stderr.decode(),
            r"^dataset-client: error: 401 Unauthorized: GET .*/datasets: missing or wrong API key\n$",
        )
        self.assertNotIn(secret.encode(), denied.stderr)
        missing = self.run_process("datasets", base_url="")
        self.assertEqual(missing.returncode, 2)
        self.assertIn(b"DATASET_CLIENT_BASE_URL", missing.stderr)
        unreachable = self.run_process(  # one retry: its wait leaves no line behind
            "--timeout",
            "2",
            "--retries",
            "1",
            "datasets",
            base_url=f"http://127.0.0.1:{free_port()}",
            key=secret,
        )
        self.assertEqual((unreachable.returncode, unreachable.stdout), (3, b""))
        self.assertEqual(unreachable.stderr.count(b"\n"), 1, "one line")
        self.assertNotIn(secret.encode(), unreachable.stderr)


class HintTests(ScriptedCommandLineTestCase):
    """Hints that point at the cause: the missing key's profile, the path to check, the date."""

    def test_hints_point_at_the_cause(self) -> None:
        config = self.tmp() / "config.toml"
        config.write_text(f'[staging]\nbase_url = "{self.server.url}/api"\n')
        config.chmod(0o600)
        self.script(reply(401, {"message": "missing or wrong API key"}))
        environment = {"DATASET_CLIENT_CONFIG": str(config)}
        status, _, err = self.run_main("--profile", "staging", "datasets", environment=environment)
        self.assertEqual(status, 1)
        said = f"(DATASET_CLIENT_API_KEY is not set, and [staging] in {config} has no api_key)\n"
        self.assertTrue(err.endswith(f": missing or wrong API key {said}"), err)
        gone = reply(404, {"message": "no such endpoint"})
        self.script(gone, gone, reply(404, {"message": "no such dataset: 'nope'"}), gone)
        day, url = ["--start", "2024-01-02", "--end", "2024-01-02"], self.server.url + "/api"
        for argv, hint in (
            (["--base-url", url + "/v1", "datasets"], " (check the path /api/v1 of --base-url)"),
            (["query", "SELECT 1"], " (check the path /api of DATASET_CLIENT_BASE_URL)"),
            (["export", "nope", "--symbols", "V", *day], ""),  # the service said what it lacks
            (["--base-url", self.server.url, "datasets"], ""),  # no path to check
        ):
            with self.subTest(argv=argv):
                status, _, err = self.run_main(*argv, key=KEY, base_url=url)
                self.assertEqual(status, 1)
                said = r"^dataset-client: error: 404 Not Found: .*: no such \w+[^(]*"
                self.assertRegex(err, said + re.escape(hint) + "\n$")
        for text, said in (
            ("2024-13-01", "there is no month 13"),
            ("2024-00-01", "there is no month 0"),
            ("2024-01-32", "there is no day 32"),
            ("2023-02-29", "there is no 29 February 2023"),
            ("2024-04-31T10:00", "there is no 31 April 2024"),
            ("0000-01-01", "there is no year 0"),
            ("2024/01/02", "use YYYY-MM-DD"),
        ):
            with self.subTest(text=text):
                argv = ["export", "trades", "--symbols", "V", "--start", "2024-01-01", "--end"]
                status, out, err = self.run_main(*argv, text)
                self.assertEqual((status, out), (2, ""))
                self.assertTrue(err.endswith(f"--end: invalid date {text!r}: {said}\n"), err)
        self.assertEqual(len(self.requests), 5, "nothing sent for a usage error")

    def test_a_401_says_where_the_key_goes_and_an_empty_key_is_called_empty(self) -> None:
        # Found by a new user (issue 38): a URL of another origin than the base URL's (another
        # port, localhost against 127.0.0.1) got no key, by design, and its 401 blamed the key.
        port = self.server.server_address[1]
        base = f"http://127.0.0.1:{port}/api"
        denied = reply(401, {"message": "missing or wrong API key"})
        other = self.start_server()  # another port
        other.default = self.server.default = denied
        hint = (
            f"missing or wrong API key (the key was not sent: it goes only to the base URL's"
            f" origin, http://127.0.0.1:{port}; give a URL there, or the path /files/x.csv alone)\n"
        )
        for url, verbose in itertools.product(
            (f"http://localhost:{port}/files/x.csv", f"{other.url}/files/x.csv"), ([], ["-v"])
        ):
            with self.subTest(url=url, verbose=verbose):
                argv = [*verbose, "download", url, str(self.tmp() / "x.csv")]
                status, out, err = self.run_main(*argv, key=KEY, base_url=base)
                self.assertEqual((status, out), (1, ""))
                self.assertTrue(err.endswith(hint), err)
                self.assertEqual(err.count("the key was not sent"), 1)
                if verbose:
                    self.assertIn(f"dataset-client: GET {url}: 401 Unauthorized", err)
        alone = {"DATASET_CLIENT_API_KEY": KEY}  # an absolute URL needs no service
        status, _, err = self.run_main("download", url, str(self.tmp() / "x"), environment=alone)
        nowhere = "(the key was not sent: it goes only to the base URL's origin, and no --base-url"
        self.assertTrue(err.endswith(f"{nowhere} is set)\n"), err)
        requests = [*self.requests, *other.requests]
        self.assertEqual(len(requests), 5)
        self.assertTrue(all("Authorization" not in r.headers for r in requests), "withheld")
        status, _, err = self.run_main("datasets", key=KEY, base_url=base)
        self.assertEqual(status, 1)
        self.assertTrue(err.endswith(": missing or wrong API key\n"), "its own origin: no hint")
        self.assertEqual(self.requests[-1].headers.get("Authorization"), f"Bearer {KEY}")
        empty = {"DATASET_CLIENT_BASE_URL": base, "DATASET_CLIENT_API_KEY": ""}
        status, _, err = self.run_main("datasets", environment=empty)
        self.assertEqual(status, 1)
        self.assertTrue(err.endswith(" (DATASET_CLIENT_API_KEY is empty)\n"), err)
