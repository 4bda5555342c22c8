"""DatasetClient.from_profile: the settings file, the variables, the arguments, and which wins."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient
from tests.support import CA_FILE, KEY, ServerTestCase, reply, server_tls_context

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class FromProfileTests(ServerTestCase):
    """DatasetClient.from_profile: the client the command line builds (the contract's Public API)."""

    def setUp(self) -> None:
        super().setUp()
        for name in [
            name for name in os.environ if name.startswith(("DATASET_CLIENT_", "XDG_CONFIG_HOME"))
        ]:
            del os.environ[name]
        os.environ["HOME"] = str(self.tmp())  # no config file of this machine's
        self.server.default = reply(body=[])

    def config(self, text: str, mode: int = 0o600, directory: Path | None = None) -> Path:
        config = (directory or self.tmp()) / "config.toml"
        config.write_text(text)
        config.chmod(mode)
        os.environ["DATASET_CLIENT_CONFIG"] = str(config)
        return config

    def test_variables_beat_the_file_and_settings_beat_both(self) -> None:
        api = self.server.url + "/api"
        self.config(f'[default]\nbase_url = "{api}/v1"\napi_key = "{KEY}"\ntimeout = 5\n')
        with DatasetClient.from_profile() as client:
            self.assertEqual((client.base_url, client.list_datasets()), (f"{api}/v1", []))
            self.assertEqual(
                (client._arguments["timeout"], client._arguments["max_retries"]), (5, 2)
            )
        os.environ.update(
            DATASET_CLIENT_BASE_URL=f"{api}/v2", DATASET_CLIENT_API_KEY="sk-of-the-variable"
        )
        with DatasetClient.from_profile() as client:
            client.list_datasets()
        with DatasetClient.from_profile(
            base_url=f"{api}/v3", api_key=None, timeout=7, max_retries=0
        ) as client:
            client.list_datasets()
            self.assertEqual(
                (client._arguments["timeout"], client._arguments["max_retries"]), (7, 0)
            )
        self.assertEqual(
            [(request.path, request.headers["Authorization"]) for request in self.requests],
            [
                ("/api/v1/datasets", f"Bearer {KEY}"),
                ("/api/v2/datasets", "Bearer sk-of-the-variable"),
                ("/api/v3/datasets", None),
            ],
        )

    def test_the_profile_asked_for_else_the_variables_else_default_and_what_is_missing_is_named(
        self,
    ) -> None:
        url = self.server.url
        config = self.config(
            f'[default]\nbase_url = "{url}/a"\n[staging]\nbase_url = "{url}/b"\ntimeout = 0\n'
        )

        def built(profile: str | None = None) -> tuple[str, float | None]:
            with DatasetClient.from_profile(profile) as client:
                return client.base_url, client._arguments["timeout"]

        self.assertEqual(built(), (f"{url}/a", 30.0))
        self.assertEqual(built("staging"), (f"{url}/b", None), "timeout = 0: no limit")
        os.environ["DATASET_CLIENT_PROFILE"] = "staging"
        self.assertEqual(built(), (f"{url}/b", None))
        self.assertEqual(built("default"), (f"{url}/a", 30.0))
        with self.assertRaises(LookupError) as caught:
            DatasetClient.from_profile("prod")
        self.assertEqual(
            str(caught.exception), f"no profile 'prod' in {config}; its profiles: default, staging"
        )
        os.environ["DATASET_CLIENT_CONFIG"] = str(config.parent / "none.toml")
        with self.assertRaises(LookupError) as caught:
            DatasetClient.from_profile()
        self.assertEqual(
            str(caught.exception), f"no config file {config.parent}/none.toml for profile staging"
        )
        self.assertEqual(self.requests, [])

    def test_no_base_url_from_anywhere_names_the_variable_and_the_file(self) -> None:
        default = f"{os.environ['HOME']}/.config/dataset-client/config.toml"
        for config in (None, '[staging]\nbase_url = "http://x"\n', "[default]\ntimeout = 5\n"):
            with self.subTest(config=config):
                config = config and str(self.config(config))
                with self.assertRaises(ValueError) as caught:
                    DatasetClient.from_profile(timeout=5)
                self.assertEqual(
                    str(caught.exception),
                    f"no service address: set DATASET_CLIENT_BASE_URL, or give the profile in {config or default}"
                    " a base_url (or pass base_url)",
                )
        os.environ["DATASET_CLIENT_BASE_URL"] = self.server.url
        with DatasetClient.from_profile() as client:
            self.assertEqual(
                client._arguments["timeout"], 5, "the profile's other settings still hold"
            )

    def test_an_unknown_key_is_a_warning_naming_it_the_file_and_the_nearest_known_key(self) -> None:
        config = self.config(
            f'[default]\nbase_url = "{self.server.url}"\ntimout = 5\ncolour = "red"\n'
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with DatasetClient.from_profile() as client:
                self.assertEqual(client._arguments["timeout"], 30.0, "an unknown key is ignored")
        self.assertEqual(
            [str(warning.message) for warning in caught],
            [
                f"unknown key 'colour' in [default] in {config} (ignored): known keys: base_url, api_key,"
                " ca_bundle, timeout",
                f"unknown key 'timout' in [default] in {config} (ignored): did you mean 'timeout'?",
            ],
        )
        self.assertEqual(
            {warning.filename for warning in caught},
            {__file__},
            "said where from_profile was called",
        )

    def test_a_file_others_can_read_or_write_or_another_user_owns_is_refused_saying_what_to_run(
        self,
    ) -> None:
        spaced = self.tmp() / "my configs"
        spaced.mkdir()
        profile = f'[default]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\n'
        for mode, said in (
            (0o640, "holds an api_key and is readable by others: run chmod 600"),
            (0o620, "is writable by group or others: not used; run chmod go-w"),
        ):
            with self.subTest(mode=oct(mode)):
                config = self.config(profile, mode, spaced)
                with self.assertRaises(PermissionError) as caught:
                    DatasetClient.from_profile()
                self.assertEqual(str(caught.exception), f"{config} {said} '{config}'")
        config = self.config(profile)
        if os.geteuid() == 0:
            os.chown(config, 4242, 4242)
            theirs: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        else:  # this user, seen as another one
            theirs = mock.patch.object(os, "geteuid", return_value=os.geteuid() + 1)
        with theirs, self.assertRaises(PermissionError) as caught:
            DatasetClient.from_profile()
        self.assertRegex(
            str(caught.exception),
            rf"^{re.escape(str(config))} is owned by another user \(uid \d+\)",
        )
        self.assertEqual(self.requests, [], "nothing sent where such a file says")

    def test_where_files_have_no_owner_or_mode_a_key_in_a_profile_is_read(self) -> None:
        # Windows: no geteuid, and every file's mode says 0o666 (0o444 read-only).
        config = self.config(f'[default]\nbase_url = "{self.server.url}"\napi_key = "{KEY}"\n')
        config.chmod(0o666)
        with mock.patch.object(dc, "_HAS_GETEUID", False), DatasetClient.from_profile() as client:
            client.list_datasets()
        self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")

    def test_a_key_by_any_spelling_is_a_key(self) -> None:
        for spelling in ("api-key", "apikey", "API_KEY", "Api-Key"):
            with self.subTest(spelling=spelling):
                config = self.config(
                    f'[default]\nbase_url = "{self.server.url}"\n{spelling} = "{KEY}"\n', 0o644
                )
                with self.assertRaises(PermissionError) as caught:
                    DatasetClient.from_profile()
                self.assertIn("is readable by others: run chmod 600", str(caught.exception))
                config.chmod(0o600)
                with self.assertWarnsRegex(UserWarning, f"^unknown key '{spelling}' in "):
                    DatasetClient.from_profile().close()
        self.config(
            f'api_key = "{KEY}"\n[default]\nbase_url = "{self.server.url}"\n', 0o604
        )  # outside a profile
        self.assertRaises(PermissionError, DatasetClient.from_profile)

    def test_a_relative_ca_bundle_is_the_config_files_neighbour_whatever_the_working_directory(
        self,
    ) -> None:
        # Issue 30: ca_bundle = "corp-ca.pem" was read from the working directory (another user's, in /tmp).
        tls = self.start_server(server_tls_context())
        tls.default = reply(body=[])
        directory, elsewhere = self.tmp(), self.tmp()
        shutil.copy(CA_FILE, directory / "corp-ca.pem")
        (elsewhere / "corp-ca.pem").write_text("planted: not the user's CA\n")
        config = self.config(
            f'[default]\nbase_url = "{tls.url}"\nca_bundle = "corp-ca.pem"\n', directory=directory
        )
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(elsewhere)
        with DatasetClient.from_profile() as client:
            self.assertEqual(client._arguments["ca_bundle"], str(directory / "corp-ca.pem"))
            os.chdir(self.tmp())
            self.assertEqual(client.list_datasets(), [])
        self.config(
            f'[default]\nbase_url = "{tls.url}"\nca_bundle = "missing.pem"\n', directory=directory
        )
        with self.assertRaises(FileNotFoundError) as caught:
            DatasetClient.from_profile()
        said = f"ca_bundle in [default] in {config} names {directory}/missing.pem, which is not a file or directory"
        self.assertTrue(str(caught.exception).startswith(said), caught.exception)
        status, err = self.cli("datasets")
        self.assertEqual((status, err.startswith(f"dataset-client: error: {said}")), (2, True), err)
        with self.assertRaisesRegex(
            FileNotFoundError, "^ca_bundle names "
        ):  # the caller's: as it is
            DatasetClient.from_profile(ca_bundle=str(directory / "missing.pem"))
        self.assertEqual(len(tls.requests), 1)

    def test_numbers_of_any_size_are_value_errors_naming_where_they_came_from(self) -> None:
        # Issue 30: a 400-digit timeout (profile, constructor) or --retries was an OverflowError traceback.
        config = self.config(f'[default]\nbase_url = "{self.server.url}"\ntimeout = {"9" * 400}\n')
        with self.assertRaises(ValueError) as caught:
            DatasetClient.from_profile()
        self.assertEqual(
            str(caught.exception),
            f"timeout in [default] in {config} must be a number of seconds (0: no limit),"
            f" not {'9' * 20}... (400 characters)",
        )
        self.assertEqual(self.cli("datasets"), (2, f"dataset-client: error: {caught.exception}\n"))
        for argument in ("timeout", "max_retries", "backoff_factor", "deadline"):
            with self.subTest(argument=argument):
                with self.assertRaises(ValueError) as caught:
                    DatasetClient(self.server.url, **{argument: 10**400})
                self.assertRegex(
                    str(caught.exception),
                    rf"^{argument} must be .*, got an integer past 1\.8e\+308",
                )
        del os.environ["DATASET_CLIENT_CONFIG"]
        status, err = self.cli("--base-url", self.server.url, "--retries", "9" * 400, "datasets")
        self.assertEqual(status, 2)
        self.assertIn(
            "dataset-client: error: argument --retries: must be 0 to 1000000, got 9999", err
        )
        self.assertEqual(self.requests, [])

    def cli(self, *argv: str) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = cli.main(list(argv))
        return status, err.getvalue()
