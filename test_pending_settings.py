"""Helper "settings"'s tests, until the suite's split into tests/ lands (then moved by concern)."""

from __future__ import annotations

import ast
import collections
import contextlib
import functools
import importlib.util
import io
import marshal
import os
import pickle
import shutil
import subprocess
import sys
import types
import unittest
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
import test_dataset_client_cli
from dataset_client import DatasetClient
from test_dataset_client import (
    HERE,
    KEY,
    ServerTestCase,
    free_port,
    outcome_of,
    reply,
    secrets_in_frames,
)


class KeyReadFromAProfileTests(ServerTestCase):
    """Issue 36: a key read from a variable or a profile is wrapped the moment it is read; no frame
    (the library's, or tomllib's kept as a cause or context) holds it in clear when from_profile
    fails."""

    def setUp(self) -> None:
        super().setUp()
        for name in [name for name in os.environ if name.startswith("DATASET_CLIENT_")]:
            del os.environ[name]
        os.environ["HOME"] = str(self.tmp())
        os.environ.pop("XDG_CONFIG_HOME", None)
        self.server.default = reply(body=[])

    def config(self, text: str) -> None:
        config = self.tmp() / "config.toml"
        config.write_text(text)
        config.chmod(0o600)
        os.environ["DATASET_CLIENT_CONFIG"] = str(config)

    def failure(self, **settings: Any) -> BaseException:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            error = outcome_of(functools.partial(DatasetClient.from_profile, **settings))
        assert isinstance(error, Exception), repr(error)
        return error

    def test_the_reviews_five_ways_leave_no_key_in_any_frame(self) -> None:
        profile = f'[default]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\n'
        cases: list[tuple[str, dict[str, str], str, dict[str, object]]] = [
            (
                "a variable's base_url without a scheme",
                {"DATASET_CLIENT_BASE_URL": "h:80", "DATASET_CLIENT_API_KEY": KEY},
                "",
                {},
            ),
            ("timeout = inf in the profile", {}, "timeout = inf\n", {}),
            ("a missing ca_bundle in the profile", {}, 'ca_bundle = "missing.pem"\n', {}),
            ("max_retries=-1 passed in", {}, "", {"max_retries": -1}),
            ("the profile's base_url without a scheme", {}, "", {"base_url": None}),
        ]
        for name, variables, more, settings in cases:
            with self.subTest(name):
                text = profile + more
                if "base_url" in settings:
                    text = f'[default]\nbase_url = "h:80"\napi_key = "{KEY}"\n'
                    settings = {}
                self.config(text)
                os.environ.update(variables)
                error = self.failure(**settings)
                for variable in variables:
                    del os.environ[variable]
                self.assertIsInstance(error, (ValueError, OSError))
                self.assertEqual(secrets_in_frames(error, KEY), [])
        self.assertEqual(self.requests, [])

    def test_a_key_in_a_variable_or_given_is_wrapped_too(self) -> None:
        self.config(f'[default]\nbase_url = "{self.server.url}"\ntimeout = inf\n')
        os.environ["DATASET_CLIENT_API_KEY"] = KEY
        self.assertEqual(secrets_in_frames(self.failure(), KEY), [])
        del os.environ["DATASET_CLIENT_API_KEY"]
        self.config(f'[default]\nbase_url = "{self.server.url}"\n')
        error = self.failure(api_key=KEY, timeout=-1)
        self.assertEqual(secrets_in_frames(error, KEY), [])

    def test_every_spelling_of_the_key_in_the_file_is_wrapped(self) -> None:
        for spelling in ("api_key", "api-key", "apikey", "API_KEY", "Api-Key"):
            for value in (f'"{KEY}"', f'["{KEY}"]', f'{{ a = "{KEY}" }}'):
                with self.subTest(spelling=spelling, value=value):
                    self.config(
                        f'[default]\nbase_url = "{self.server.url}"\n{spelling} = {value}\n'
                        'timeout = "soon"\n'
                    )
                    error = self.failure()
                    self.assertIsInstance(error, ValueError)
                    self.assertEqual(secrets_in_frames(error, KEY), [])

    def test_a_malformed_file_keeps_no_frame_of_tomllib_holding_its_text(self) -> None:
        # tomllib's frames hold the whole text (its key among it) in their locals: a
        # TOMLDecodeError kept as the context of the ValueError said instead showed it.
        for broken in ("broken = \n", "x = [" * 2000, 'x = "\\q"\n'):
            with self.subTest(broken=broken[:12]):
                self.config(f'[default]\napi_key = "{KEY}"\n{broken}')
                error = self.failure()
                self.assertIsInstance(error, ValueError)
                self.assertTrue(str(error).startswith("cannot read the config file "), error)
                self.assertIsNone(error.__context__)
                self.assertEqual(secrets_in_frames(error, KEY), [])

    def test_the_key_read_still_goes_where_it_went(self) -> None:
        self.config(f'[default]\nbase_url = "{self.server.url}"\napi-key = "{KEY}"\n')
        with self.assertWarnsRegex(UserWarning, "^unknown key 'api-key' in "):
            client = DatasetClient.from_profile()
        with client:
            client.list_datasets()
        self.config(f'[default]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\n')
        with DatasetClient.from_profile() as client:
            client.list_datasets()
            self.assertIsInstance(client._arguments["api_key"], dc._Secret)
        self.assertEqual(
            [request.headers["Authorization"] for request in self.requests], [None, f"Bearer {KEY}"]
        )


class KeyGivenToTheConstructorTests(ServerTestCase):
    """Issue 36's own pass: what else reads a key before wrapping it."""

    def test_headers_in_any_mapping_are_wrapped_before_any_check(self) -> None:
        tenant = "tenant-secret-0042"
        for headers in (
            types.MappingProxyType({"X-Tenant": tenant, "Bad Name": "x"}),
            collections.OrderedDict([("X-Tenant", tenant), ("X-Bad", "a\nb")]),
            collections.UserDict({"X-Tenant": tenant, "Content-Length": "1"}),
        ):
            with self.subTest(headers=type(headers).__name__):
                error = outcome_of(
                    functools.partial(DatasetClient, self.server.url, KEY, headers=headers)
                )
                self.assertIsInstance(error, ValueError)
                # The constructor's own argument is the caller's; every frame below it is not.
                assert isinstance(error, ValueError), repr(error)
                found = secrets_in_frames(error, KEY, tenant)
                self.assertEqual([where for where in found if "__init__" not in where], [])
                self.assertEqual(found, [])


# Signed URLs' credentials in the forms the fourth review found shown: the first parameter of a URL
# nested in another's query, once and twice encoded; GSON's and HTML's escapes of "=".
NESTED_SIGNED = {
    "X-Amz-Signature": "%3FX-Amz-Signature%3D816d0123nested01",
    "access_token": "%3Faccess_token%3Dya29nested02",
    "Policy": "%3FPolicy%3DeyJnested03%26Signature%3DZm9nested04",
    "twice": "%253FX-Amz-Signature%253D816d0123nested05",
    "twice, lower case": "%253fsig%253dr2BVnested06",
}
NESTED_VALUES = ["816d0123nested01", "ya29nested02", "eyJnested03", "Zm9nested04"]
NESTED_VALUES += ["816d0123nested05", "r2BVnested06"]


class NestedSignedUrlTests(ServerTestCase):
    def test_a_nested_signed_urls_first_parameter_is_redacted_once_or_twice_encoded(self) -> None:
        secrets = dc._Secrets(signed=True)
        for name, nested in NESTED_SIGNED.items():
            with self.subTest(name):
                url = f"https://app.example/login?next=https%3A%2F%2Fs3.example%2Fb%2Fx{nested}"
                shown = secrets.redact(url)
                self.assertEqual([value for value in NESTED_VALUES if value in shown], [])
                self.assertIn("<redacted>", shown)
        for text in ("?next=%3Fsigma%3D1", "%253Fdesign%253D2", "a=1&#61;"):
            self.assertEqual(secrets.redact(text), text, "names alone, and no credential")

    def test_gson_and_html_escapes_of_equals_are_redacted_in_an_error_body(self) -> None:
        storage = self.start_server()
        bodies = [
            '{"url": "https://s3.example/b/x?X-Amz-Date=1\\u0026X-Amz-Signature\\u003d816d0123nested01"}',
            '<a href="https://s3.example/b/x?a=1&amp;Signature&#61;Zm9nested04">',
            '<a href="https://s3.example/b/x?Policy&#x3D;eyJnested03&amp;b=2">',
            '{"url": "https://s3.example/b/x?sig\\u003Dr2BVnested06"}',
        ]
        for body in bodies:
            with self.subTest(body=body[:40]):
                storage.script.append(reply(403, body.encode(), content_type="text/plain"))
                error = outcome_of(
                    lambda: self.client(max_retries=0).download(storage.url + "/f", io.BytesIO())
                )
                assert isinstance(error, dc.ServiceError), repr(error)
                texts = [str(error), repr(error), error.body, repr(vars(error))]
                self.assertEqual([v for v in NESTED_VALUES for t in texts if v in t], [])

    def test_every_text_about_a_nested_signed_url_is_redacted(self) -> None:
        storage = self.start_server()
        path = f"/b/x?next=https%3A%2F%2Fs3.example%2Fb%2Fy{NESTED_SIGNED['Policy']}"
        path += f"&back={NESTED_SIGNED['twice']}"
        storage.script.append(reply(503, b"busy", content_type="text/plain"))
        with self.assertLogs("dataset_client", level="DEBUG") as logs:
            error = outcome_of(
                lambda: self.client(max_retries=0).download(storage.url + path, io.BytesIO())
            )
        assert isinstance(error, dc.ServiceError), repr(error)
        self.assertEqual(storage.requests[-1].path, path, "sent as given")
        texts = [str(error), repr(error), repr(error.args), error.url, *logs.output]
        self.assertEqual([v for v in NESTED_VALUES for t in texts if v in t], [])
        storage.script.append(reply(503, b"busy", content_type="text/plain"))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["--retries", "0", "download", storage.url + path, str(self.tmp())])
        self.assertEqual(status, 1, err.getvalue())
        self.assertEqual([v for v in NESTED_VALUES if v in err.getvalue()], [])

    def test_a_value_error_about_a_signed_download_url_shows_no_credential(self) -> None:
        signed = "X-Amz-Date=1&X-Amz-Signature=816d0123nested01&token=ya29nested02"
        for url in (
            f"https://s3.example/b/x?{signed} ",
            f"https://s3.example/b/x?{signed}\t",
            f"https:///b/x?{signed}",
            f"ftp://s3.example/b/x?{signed}",
            f"https://s3.example:99999/b/x?{signed}",
            f"https://s3.example/b/x?{signed}&\udc80",
            "https://s3.example/b/x?X-Amz-Signature=816d0123nested01&\udc80",
            "https://s3.example/b/\udc80?X-Amz-Signature=816d0123nested01",
        ):
            with self.subTest(url=url):
                error = outcome_of(functools.partial(self.client().download, url, io.BytesIO()))
                self.assertIsInstance(error, ValueError)
                self.assertEqual([v for v in NESTED_VALUES if v in str(error)], [], error)
        self.assertEqual(self.requests, [])


class RedirectLocalsTests(ServerTestCase):
    def test_a_keyless_clients_failed_redirect_keeps_no_signed_location_in_frames(self) -> None:
        # Issue 36: with no key, no secret was held, so the traceback stayed, and with it the
        # locals of _send_handling_redirects: the Location, signature and all.
        storage = self.start_server()
        signed = "X-Amz-Date=1&X-Amz-Signature=816d0123location01"
        unreachable = f"http://127.0.0.1:{free_port()}/b/x?{signed}"
        for location, answer in (
            (f"{storage.url}/b/x?{signed}", reply(404, b"<Error>NoSuchKey</Error>")),
            (f"{storage.url}/b/x?{signed}", reply(503, b"busy")),
            (unreachable, None),
        ):
            with self.subTest(location=location, answer=answer):
                if answer is not None:
                    storage.script.append(answer)
                self.script(reply(302, b"", {"Location": location}))
                client = self.client(api_key=None, max_retries=0)
                error = outcome_of(client.list_datasets)
                assert isinstance(error, dc.DatasetClientError), repr(error)
                self.assertEqual(secrets_in_frames(error, "816d0123location01"), [])


class StatusLineCostTests(unittest.TestCase):
    def test_fitting_a_retry_line_is_linear_in_the_servers_reason(self) -> None:
        # Issue 36: a 60 KB reason phrase cost 1.8 s of CPU a line (a pattern tried from every
        # word, a replace and a measure of the whole line per URL in it). At 1 MB, what is
        # quadratic takes minutes: this test would not end (no timing is asserted).
        size = 1_000_000
        for reason in (
            "a." * (size // 2),
            "a://b " * (size // 6),
            "GET a://b: " * (size // 11),
            "http://h/" + ":" * size,
            "A " * (size // 2),
            ".a" * (size // 2) + "://",
        ):
            with self.subTest(reason=reason[:12]):
                line = (
                    f"dataset-client: retrying in 1.0 s (2 attempts left): GET http://h/x: {reason}"
                )
                fitted = cli._status_fitted(line, 80)
                self.assertLessEqual(len(fitted), 80)
                self.assertIn("retrying in 1.0 s (2 attempts left):", fitted)


class PlantedBesideTests(ServerTestCase):
    """Issue 36: a file beside the library runs only when it is the user's own regular file (or
    root's), compiled from its source; never a .pyc from __pycache__; another version in one line."""

    # The pair copied into a directory of its own, as the two-files tests copy it.
    pair = test_dataset_client_cli.TwoFilesTests.copied

    def run_python(self, *argv: str, cwd: Path) -> tuple[int, str, str]:
        unset = ("DATASET_CLIENT_", "PYTHONPATH", "COVERAGE_", "PYTHONDONTWRITEBYTECODE")
        environment = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
        environment |= {"DATASET_CLIENT_BASE_URL": self.server.url, "HOME": str(self.tmp())}
        environment.pop("PYTHONPYCACHEPREFIX", None)  # __pycache__ beside the files, as a user's
        done = subprocess.run(
            [sys.executable, *argv], cwd=cwd, env=environment, capture_output=True, timeout=60
        )
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    def planted_pyc(self, source: Path) -> None:
        """A .pyc in __pycache__ whose header matches ``source`` (mtime, size), as Python's loader
        checks it: its code, run, would print PLANTED."""
        status = source.stat()
        code = compile("print('PLANTED')\n", str(source), "exec")
        header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
        header += (int(status.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        header += (status.st_size & 0xFFFFFFFF).to_bytes(4, "little")
        cache = source.parent / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / f"{source.stem}.{sys.implementation.cache_tag}.pyc").write_bytes(
            header + marshal.dumps(code)
        )

    def test_a_pyc_in_pycache_is_never_run_with_or_without_bytecode_writing(self) -> None:
        pair = self.pair("dataset_client.py", "dataset_client_cli.py")
        self.planted_pyc(pair / "dataset_client_cli.py")
        self.planted_pyc(pair / "dataset_client.py")
        for flags in (["-I"], ["-I", "-B"]):
            for script in ("dataset_client.py", "dataset_client_cli.py"):
                with self.subTest(flags=flags, script=script):
                    done = self.run_python(*flags, str(pair / script), "--version", cwd=self.tmp())
                    self.assertEqual(done, (0, f"dataset-client {dc.__version__}\n", ""))

    def test_a_file_beside_owned_by_another_user_is_one_line_naming_it_and_its_owner(self) -> None:
        pair = self.pair("dataset_client.py", "dataset_client_cli.py")
        planted = pair / "dataset_client_cli.py"
        planted.write_text("print('PLANTED')\n")
        owner = os.geteuid()
        theirs: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if owner == 0:
            os.chown(planted, owner := 4242, 4242)
        else:  # this user's file, seen as another user's (as the suite's owner tests do)
            theirs = mock.patch.object(dc.os, "geteuid", return_value=owner + 1)
        with theirs, self.assertRaises(ImportError) as caught:
            dc._own_source(str(planted))
        said = f"{planted} is not run: not a regular file of yours (owner: uid {owner})"
        self.assertEqual(caught.exception.msg, said)
        if os.geteuid() != 0:
            self.skipTest("not root: a file another user owns cannot be made here")
        done = self.run_python("-I", str(pair / "dataset_client.py"), "datasets", cwd=self.tmp())
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        library = pair / "dataset_client.py"
        os.chown(library, 4242, 4242)
        planted.write_bytes((HERE / "dataset_client_cli.py").read_bytes())
        os.chown(planted, 0, 0)
        done = self.run_python("-I", str(planted), "datasets", cwd=self.tmp())
        said = f"{library} is not a regular file of yours (its owner: uid 4242)"
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        self.assertEqual(self.requests, [])

    def test_a_link_or_a_fifo_beside_is_not_run_and_never_waited_on(self) -> None:
        pair = self.pair("dataset_client.py")
        elsewhere = self.tmp() / "dataset_client_cli.py"
        shutil.copy(HERE / "dataset_client_cli.py", elsewhere)
        (pair / "dataset_client_cli.py").symlink_to(elsewhere)
        done = self.run_python("-I", str(pair / "dataset_client.py"), "datasets", cwd=self.tmp())
        said = f"{pair}/dataset_client_cli.py is not run: not a regular file of yours (owner: uid {os.geteuid()})"
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        (pair / "dataset_client_cli.py").unlink()
        os.mkfifo(pair / "dataset_client_cli.py")
        done = self.run_python("-I", str(pair / "dataset_client.py"), "datasets", cwd=self.tmp())
        said = f"{pair}/dataset_client_cli.py is not run: not a regular file of yours (owner: uid {os.geteuid()})"
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        lone = self.pair("dataset_client_cli.py")
        os.mkfifo(lone / "dataset_client.py")
        done = self.run_python("-I", str(lone / "dataset_client_cli.py"), "datasets", cwd=lone)
        said = f"{lone}/dataset_client.py is not a regular file of yours (its owner: uid "
        self.assertEqual(done[:2], (2, ""))
        self.assertTrue(done[2].startswith(f"dataset-client: error: {said}"), done[2])
        self.assertEqual(self.requests, [])

    def test_a_file_of_another_version_beside_is_one_line(self) -> None:
        pair = self.pair("dataset_client.py")
        cli_text = (HERE / "dataset_client_cli.py").read_text()
        cli_path, library = pair / "dataset_client_cli.py", pair / "dataset_client.py"
        newer = cli_text.replace(f'__version__ = "{dc.__version__}"', '__version__ = "9.0.0"')
        lacking = cli_text.replace("    DatasetClient,\n", "    DatasetClient,\n    _Gone,\n", 1)
        for text, said in (
            (
                newer,
                f"{cli_path} does not fit this dataset_client.py: it is version 9.0.0, this"
                f" {dc.__version__}",
            ),
            (
                lacking,
                f"{cli_path} does not fit this dataset_client.py: cannot import name '_Gone' from"
                f" '__main__' ({library})",
            ),
        ):
            with self.subTest(said=said):
                cli_path.write_text(text)
                done = self.run_python("-I", str(library), "datasets", cwd=self.tmp())
                self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        cli_path.write_text(cli_text)
        library.write_text(
            library.read_text().replace(f'__version__ = "{dc.__version__}"', '__version__ = "0.9"')
        )
        done = self.run_python("-I", str(cli_path), "datasets", cwd=self.tmp())
        said = f"{library} is version 0.9, not {dc.__version__}: copy the two together"
        self.assertEqual(done, (2, "", f"dataset-client: error: {said}\n"))
        self.assertEqual(self.requests, [])


class OneWayBetweenTheCommandLineAndTheLibraryTests(ServerTestCase):
    """Issue 37 items 3-5: what the command line needs is public: redact, read_settings, resolve,
    worded; its messages read from fields, never rewritten."""

    def test_redact_hides_the_key_in_any_form_and_signed_urls_unless_asked_not_to(self) -> None:
        client = self.client()
        signed = "https://s3.example/b/x?X-Amz-Signature=816d0123secret"
        text = f"echoed {KEY}, {KEY.replace('-', '%2D')} and {signed}"
        self.assertEqual(
            client.redact(text),
            "echoed <redacted>, <redacted> and https://s3.example/b/x?X-Amz-Signature=<redacted>",
        )
        result = {"rows": [[KEY, signed]], "n": 1}
        self.assertEqual(
            client.redact(result, signed_urls=False), {"rows": [["<redacted>", signed]], "n": 1}
        )
        self.assertEqual(result["rows"][0][0], KEY, "a copy: the result itself is left")
        keyless = self.client(api_key=None)
        self.assertEqual(keyless.redact(KEY, signed_urls=False), KEY)

    def test_read_settings_says_where_each_setting_came_from(self) -> None:
        for name in [name for name in os.environ if name.startswith("DATASET_CLIENT_")]:
            del os.environ[name]
        config = self.tmp() / "config.toml"
        config.write_text(
            f'[staging]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\ntimeout = 7\n'
        )
        config.chmod(0o600)
        os.environ.update(DATASET_CLIENT_CONFIG=str(config), DATASET_CLIENT_API_KEY="sk-variable")
        found = DatasetClient.read_settings("staging", max_retries=0)
        where = f"[staging] in {config}"
        self.assertEqual(
            found,
            {
                "base_url": (self.server.url, where),
                "api_key": ("sk-variable", "DATASET_CLIENT_API_KEY"),
                "timeout": (7, where),
                "max_retries": (0, "argument"),
            },
        )
        self.assertIsInstance(found["api_key"][0], dc._Secret)
        found = DatasetClient.read_settings("staging", base_url="http://elsewhere")
        self.assertEqual(found["base_url"], ("http://elsewhere", "argument"))
        del os.environ["DATASET_CLIENT_API_KEY"]
        found = DatasetClient.read_settings("staging", base_url="http://elsewhere")
        self.assertEqual(found["api_key"], (None, where), "the profile's key: its own service's")

    def test_resolve_is_the_url_download_fetches(self) -> None:
        client = self.client(self.server.url + "/api/v1")
        self.assertEqual(client.resolve("files/x.csv"), self.server.url + "/api/v1/files/x.csv")
        self.assertEqual(client.resolve("/files/\u00e9"), self.server.url + "/files/%C3%A9")
        with self.assertRaisesRegex(ValueError, "^download_url must be an http"):
            client.resolve("ftp://h/x")

    def test_errors_say_what_they_name_in_a_callers_words(self) -> None:
        error = outcome_of(lambda: self.client().download("ftp://h/x", io.BytesIO()))
        assert isinstance(error, ValueError), repr(error)
        self.assertEqual(error.named, {"download_url": 0})  # type: ignore[attr-defined]
        self.assertEqual("".join(error.parts), str(error))  # type: ignore[attr-defined]
        ended = dc._Deadline(1.5).reached("GET", "http://h/x")
        ended.attempts = 2
        self.assertEqual(
            str(ended), "GET http://h/x: the deadline of 1.5 s was reached (after 2 attempts)"
        )
        self.assertEqual(
            ended.worded(deadline="--max-time 1.5"),
            "GET http://h/x: --max-time 1.5 was reached (after 2 attempts)",
        )
        self.assertEqual(
            pickle.loads(pickle.dumps(ended)).worded(deadline="D"),
            "GET http://h/x: D was reached (after 2 attempts)",
        )
        self.assertEqual(
            dc.ServiceError(404, "Not Found", "GET", "http://h/x").worded(x="y"),
            "404 Not Found: GET http://h/x",
        )

    def test_the_command_line_reaches_no_more_than_three_private_names(self) -> None:
        sys.path.insert(0, str(HERE / ".ci"))
        self.addCleanup(sys.path.remove, str(HERE / ".ci"))
        import count_lines

        library = ast.parse((HERE / "dataset_client.py").read_text())
        command_line = ast.parse((HERE / "dataset_client_cli.py").read_text())
        members = count_lines.private_members(library)
        names = count_lines.private_library_names(command_line, members)
        self.assertEqual(names, ["_PartialFile", "_UNSEEN", "_size"])
        reach = ast.parse("def f(client):\n    return client._secrets, self._x, parser._actions\n")
        self.assertEqual(count_lines.private_library_names(reach, members), ["client._secrets"])


class PlantedBesideInProcessTests(ServerTestCase):
    """The loader's refusals, in this process (the subprocess tests above run copies)."""

    def test_own_source_reads_the_users_regular_file_and_refuses_the_rest(self) -> None:
        directory = self.tmp()
        own = directory / "own.py"
        own.write_text("x = 1\n")
        self.assertEqual(dc._own_source(str(own)), b"x = 1\n")
        self.assertIsNone(dc._own_source(str(directory / "missing.py")))
        (directory / "link.py").symlink_to(own)
        os.mkfifo(directory / "fifo.py")
        for name in ("link.py", "fifo.py"):
            with self.subTest(name=name), self.assertRaises(ImportError) as caught:
                dc._own_source(str(directory / name))
            said = "is not run: not a regular file of yours (owner: uid"
            self.assertIn(f"{directory / name} {said} {os.geteuid()})", caught.exception.msg)

    def test_a_command_line_of_another_version_is_refused_and_not_left_registered(self) -> None:
        copy = self.tmp() / "dataset_client_cli.py"
        copy.write_text('__version__ = "0.1"\n')
        with mock.patch.dict(sys.modules), self.assertRaises(ImportError) as caught:
            del sys.modules["dataset_client_cli"]
            dc._command_line(str(copy))
        self.assertNotIn("0.1", getattr(sys.modules.get("dataset_client_cli"), "__version__", ""))
        said = (
            f"{copy} does not fit this dataset_client.py: it is version 0.1, this {dc.__version__}"
        )
        self.assertEqual(caught.exception.msg, said)
        err = io.StringIO()
        with mock.patch.dict(sys.modules), contextlib.redirect_stderr(err):
            del sys.modules["dataset_client_cli"]
            with mock.patch.object(dc, "_command_line", side_effect=ImportError(said)):
                self.assertEqual(dc.main(["--version"]), 2)
        self.assertEqual(err.getvalue(), f"dataset-client: error: {said}\n")

    def test_no_file_beside_is_the_installed_one_else_one_line_saying_where_to_get_it(self) -> None:
        missing = str(self.tmp() / "dataset_client_cli.py")
        self.assertIs(dc._command_line(missing), cli, "importable: the installed one")
        halted = mock.patch.dict(sys.modules, {"dataset_client_cli": None})
        with halted, self.assertRaises(ImportError) as caught:
            dc._command_line(missing)
        self.assertEqual(
            caught.exception.msg,
            "the command line is dataset_client_cli.py: copy it beside dataset_client.py, or pip"
            " install dataset-client",
        )
