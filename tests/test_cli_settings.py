"""The command line's settings: options and their values, usage errors, help, profiles."""

from __future__ import annotations

import json
import os
from typing import Any
from unittest import mock

import dataset_client as dc
import dataset_client_cli as cli
from dataset_client import DatasetClient
from tests.support import (
    DATA,
    EXPORT_V,
    KEY,
    ScriptedCommandLineTestCase,
    StandInTestCase,
    assert_usage_errors,
    recorded_sleeps,
    reply,
    serve_file,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class OptionTests(StandInTestCase):
    """Options, their values and help: usage errors send nothing."""

    def test_help_for_every_command(self) -> None:
        for argv in ([], ["datasets"], ["query"], ["export"], ["download"]):
            with self.subTest(argv=argv):
                status, out, _ = self.run_main(*argv, "--help")
                self.assertEqual(status, 0)
                self.assertIn("usage: dataset-client", out)

    def test_help_per_command(self) -> None:
        status, out, _ = self.run_main("--help")
        self.assertEqual(status, 0)
        self.assertIn("Exit status: 0 ok", out)
        for command in cli._COMMANDS:
            with self.subTest(command=command):
                status, out, _ = self.run_main(command, "--help")
                self.assertEqual(status, 0)
                self.assertTrue(out.startswith(f"usage: dataset-client {command} [-h]"), out)
                options, examples = out.split("\nexamples:\n")
                self.assertNotIn("Exit status", out, "the global epilog is not repeated")
                self.assertNotIn("--base-url", options)
                self.assertNotIn("--output", options)
                self.assertIn(f"dataset-client {command}", examples)
                self.assertTrue(all(len(line) < 80 for line in out.splitlines()), out)
        self.assertIn("--limit-rate RATE", self.run_main("download", "--help")[1])

    def test_a_command_is_one_entry_of_the_table_its_help_arguments_run_and_completion(
        self,
    ) -> None:
        self.server.default = reply(body=[{"name": "scripted"}])
        ran = []

        def run(client: dc.DatasetClient, settings: Any, stderr: Any) -> None:
            ran.append((settings.command, settings.thing, client.list_datasets()))

        ping = cli._Command(
            "ping the service",
            "Ping it.",
            ["dataset-client ping x"],
            lambda parser: parser.add_argument("thing", metavar="THING", choices=("x", "y")),
            run,
            operands=("x", "y"),
        )
        with mock.patch.dict(cli._COMMANDS, {"ping": ping}):
            status, out, err = self.run_main("--base-url", self.server.url + "/api", "ping", "x")
            self.assertEqual((status, out, err), (0, "", ""))
            self.assertEqual(ran, [("ping", "x", [{"name": "scripted"}])])
            self.assertEqual(self.requests[-1].path, "/api/datasets")
            status, out, _ = self.run_main("--help")
            self.assertIn("    ping                ping the service\n", out)
            status, out, _ = self.run_main("ping", "--help")
            self.assertIn("Ping it.\n\npositional arguments:\n  THING\n", out)
            self.assertIn("examples:\n  dataset-client ping x\n", out)
            script = cli._completion_script("bash", cli._build_parser())
        self.assertIn('"ping") if [[ $cur == -* ]]; then', script)
        self.assertIn('else COMPREPLY=($(compgen -W "x y" -- "$cur")); fi ;;', script)
        self.assertIn('case "$word" in datasets|query|export|download|completion|ping)', script)

    def test_usage_errors_send_nothing(self) -> None:
        for argv in (
            ["bogus"],
            [
                "export",
                "daily_bars",
                "--symbols",
                "A",
                "--start",
                "2024-02-30",
                "--end",
                "2024-03-01",
            ],
            [
                "export",
                "daily_bars",
                "--symbols",
                "A",
                "--start",
                "2024-03-01",
                "--end",
                "2024-02-01",
            ],
            [
                "export",
                "daily_bars",
                "--symbols",
                ",",
                "--start",
                "2024-01-01",
                "--end",
                "2024-02-01",
            ],
            ["query", "  "],
            ["--timeout", "-1", "datasets"],
            ["download", "ftp://host/file", "out"],
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                self.assertTrue(err)

    def test_retries_timeout_and_verbosity(self) -> None:
        base = self.server.url + "/api"
        self.script(
            reply(503, {"message": "busy"}), reply(503, {"message": "busy"}), reply(body=[])
        )
        status, _, err = self.run_main("--retries", "0", "-v", "datasets", base_url=base)
        self.assertEqual(status, 1)
        self.assertEqual(len(self.requests), 1)
        self.assertRegex(
            err,
            r"^dataset-client: GET http://127\.0\.0\.1:\d+/api/datasets: 503 Service Unavailable \(\d+ ms\)\n",
        )
        self.assertIn("dataset-client: error: 503 Service Unavailable: GET", err)
        with recorded_sleeps():
            status, out, err = self.run_main("--timeout", "0", "-v", "datasets", base_url=base)
        self.assertEqual((status, json.loads(out)), (0, []))
        self.assertEqual(err.count("dataset-client: retrying in "), 1, err)
        self.assertEqual(err.count(": 200 OK ("), 1, err)
        self.assertNotIn("stand-in-key", err)

    def test_limit_rate_is_the_librarys_max_rate(self) -> None:
        rates: list[object] = []

        def recording(client: DatasetClient, *args: object, **options: object) -> None:
            rates.append(options.get("max_rate", "not passed"))

        url = self.server.url + "/files/x"
        with mock.patch.object(dc.DatasetClient, "download", recording):
            for rate in ("500K", "10M", "1G", "1.5k", "2048", None):
                argv = [
                    "download",
                    url,
                    str(self.tmp() / "x"),
                    *(["--limit-rate", rate] if rate else []),
                ]
                self.assertEqual(self.run_main(*argv, environment={})[0], 0)
        self.assertEqual(rates, [512_000, 10_485_760, 1_073_741_824, 1536, 2048, "not passed"])
        for rate in ("-5", "1T", "fast"):  # 0: no limit (ScriptedCommandLineTestCase)
            with self.subTest(rate=rate):
                status, _, err = self.run_main(
                    "download", url, "x", "--limit-rate", rate, environment={}
                )
                self.assertEqual(status, 2)
                self.assertIn("bytes per second, such as 500K, 10M or 1G", err)
        self.assertEqual(self.requests, [], "a bad rate sends nothing")
        self.server.default = serve_file(DATA)
        destination = self.tmp() / "x"
        status, _, err = self.run_main(
            "download",
            url,
            str(destination),
            "--limit-rate",
            "1G",
            "--connections",
            "2",
            environment={},
        )
        self.assertEqual((status, destination.read_bytes()), (0, DATA), err)

    def test_numbers_of_any_size_are_usage_errors_naming_the_option(self) -> None:
        huge = "9" * 400
        for option in (
            "--retries",
            "--connections",
            "--timeout",
            "--max-time",
            "--limit-rate",
            "--speed-limit",
        ):
            for value in (huge, "9" * 5000):
                with self.subTest(option=option, digits=len(value)):
                    status, out, err = self.run_main("download", "/x", "out", option, value)
                    self.assertEqual((status, out), (2, ""), err)
                    self.assertRegex(
                        err.splitlines()[-1],
                        rf"^dataset-client download: error: argument {option}: ",
                    )
                    self.assertNotIn("Error", err)
                    self.assertLess(len(err.splitlines()[-1]), 160, "the value shown cut")
        self.assertEqual(self.requests, [], "nothing sent")

    def test_limit_rate_below_speed_limit_is_refused_before_any_request(self) -> None:
        url = self.server.url + "/files/x"
        export = [
            *EXPORT_V,
        ]
        for argv in (
            ["download", url, "out", "--limit-rate", "50K", "--speed-limit", "100K"],
            [*export, "--speed-limit", "100K", "--download", "--limit-rate", "50K"],
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv, base_url=self.server.url)
                self.assertEqual((status, out), (2, ""))
                self.assertEqual(
                    err.splitlines()[-1],
                    f"dataset-client {argv[0]}: error: --limit-rate 50.0 KiB/s is below"
                    " --speed-limit 100.0 KiB/s: every connection would stall; raise --limit-rate"
                    " or lower --speed-limit",
                )
        rates = ["--limit-rate", "150K", "--speed-limit", "100K", "--connections", "2"]
        status, _, err = self.run_main("download", url, "out", *rates)
        self.assertEqual(status, 2)
        self.assertTrue(
            err.endswith(
                "error: --limit-rate 150.0 KiB/s is below --speed-limit 100.0 KiB/s times"
                " --connections 2: every connection would stall; raise --limit-rate or lower"
                " --speed-limit or --connections\n"
            ),
            err,
        )
        self.assertEqual(self.requests, [], "nothing sent")
        called: list[dict[str, object]] = []
        with mock.patch.object(dc.DatasetClient, "download", lambda *_, **kw: called.append(kw)):
            for limit, floor, status in (("0", "1K", 0), ("200K", "100K", 0), ("100K", "100K", 2)):
                argv = ["download", url, str(self.tmp() / "x"), "--connections", "2"]
                argv += ["--limit-rate", limit, "--speed-limit", floor]
                self.assertEqual(self.run_main(*argv, environment={})[0], status)
        self.assertEqual([options.get("max_rate") for options in called], [None, 204_800])


class OptionValueTests(ScriptedCommandLineTestCase):
    """A mistyped option or a bad value, as a new user meets them; --limit-rate 0."""

    def test_a_mistyped_option_says_so_before_or_after_the_command(self) -> None:
        for argv, text in (
            (
                ["--outptu", "csv", "datasets"],
                "unknown option '--outptu' (did you mean '--output'?)",
            ),
            (
                ["-o", "csv", "datasets"],
                "unknown option '-o' (did you mean '--output'?)",
            ),  # csv is not the command
            (
                ["datasets", "--outptu", "csv"],
                "unknown option '--outptu' (did you mean '--output'?)",
            ),
            (
                ["export", "trades", "--formta", "csv"],
                "unknown option '--formta' (did you mean '--format'?)",
            ),
            (
                ["datasets", "--symbols", "V"],
                "unknown option '--symbols'",
            ),  # another command's option
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                self.assertEqual(err.splitlines()[-1], f"dataset-client: error: {text}")
                self.assertNotIn("command", err.splitlines()[-1])
        self.script(reply(body=[]), reply(body=[]), reply(body=[]))  # what is known still runs
        for argv in (["--out", "csv", "datasets"], ["datasets", "--timeout=5"], ["-q", "datasets"]):
            with self.subTest(argv=argv):
                status, _, err = self.run_main(*argv)
                self.assertEqual(status, 0, err)
        self.assertEqual(
            [r.path for r in self.requests], ["/api/datasets"] * 3, "nothing sent for a usage error"
        )

    def test_mistakes_are_blamed_on_the_right_word(self) -> None:
        day = ["--start", "2024-01-02", "--end", "2024-01-02"]
        command = "unknown command 'exprot': did you mean 'export'?"
        dest = (
            "the following arguments are required: DATASET (--download took 'trades' as its DEST:"
            " give DATASET first, as in export trades ... --download)"
        )
        for argv, usage, text in (
            (["exprot", "trades", "--symbols", "V", *day], "", command),
            (["--output", "csv", "exprot", "trades", "--symbols", "V"], "", command),
            (["exprot", "trades"], "", command),  # as before
            (["export", "--download", "trades", "--symbols", "V", *day], " export", dest),
            (
                ["export", "trades", "--symbols", "V", "--from", "2024-01-02"],
                " export",
                "unknown option '--from' (did you mean '--start'?)",
            ),
            (
                ["export", "trades", "--symbols", "V", "--to=2024-01-02"],
                " export",
                "unknown option '--to' (did you mean '--end'?)",
            ),
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                self.assertTrue(err.startswith(f"usage: dataset-client{usage} [-h]"), err)
                prog = " export" if text == dest else ""  # argparse's own error: its command's
                self.assertEqual(err.splitlines()[-1], f"dataset-client{prog}: error: {text}")
        status, out, err = self.run_main("--output", "csv", "exprot", "--symbols", "V")
        self.assertEqual(err.splitlines()[-1], f"dataset-client: error: {command}")
        key = (
            "unknown option '--api-key': the key comes from DATASET_CLIENT_API_KEY or a profile's"
            " api_key, never from the command line, where ps shows it"
        )
        for argv in (
            ["--api-key=SECRET-4242", "datasets"],
            ["--api-key", "SECRET-4242", "datasets"],
            ["-v", "datasets", "--api-key", "SECRET-4242"],
            ["datasets", "--apikey=SECRET-4242"],
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                option = next(word for word in argv if word.startswith("--api"))
                said = key.replace("--api-key", option.partition("=")[0], 1)
                self.assertEqual(err.splitlines()[-1], f"dataset-client: error: {said}")
                self.assertNotIn("SECRET", err, "the key is never echoed")
        self.assertEqual(self.requests, [], "nothing sent")

    def test_a_mistyped_option_prints_the_usage_of_its_command(self) -> None:
        day = ["--start", "2024-01-02", "--end", "2024-01-02"]
        for argv, usage, told in (
            (
                ["export", "trades", "--simbols", "V", *day],
                "usage: dataset-client export [-h] --symbols SYMBOLS",
                "unknown option '--simbols' (did you mean '--symbols'?)",
            ),
            (["datasets", "--outptu", "csv"], "usage: dataset-client datasets [-h]", "unknown"),
            (["--outptu", "csv", "datasets"], "usage: dataset-client [-h] [--base-url", "unknown"),
        ):
            with self.subTest(argv=argv):
                status, out, err = self.run_main(*argv)
                self.assertEqual((status, out), (2, ""))
                self.assertTrue(err.startswith(usage + " "), err)
                self.assertTrue(err.splitlines()[-1].startswith(f"dataset-client: error: {told}"))
        self.assertEqual(self.requests, [])

    def test_bad_values_name_the_option_and_what_it_takes(self) -> None:
        seconds = "give seconds, 0 or more (0: no limit)"
        rate = "bytes per second, such as 500K, 10M or 1G"
        errors = assert_usage_errors(
            self,
            ("--timeout -1 datasets", f"argument --timeout: invalid value '-1': {seconds}"),
            ("--timeout soon datasets", f"argument --timeout: invalid value 'soon': {seconds}"),
            ("download /x out --connections 0", "argument --connections: must be 1 to 32, got 0"),
            (
                "download /x out --connections 100",
                "argument --connections: must be 1 to 32, got 100",
            ),
            (
                "download /x out --limit-rate -5",
                f"argument --limit-rate: invalid rate '-5': {rate}",
            ),
        )
        for err in errors:
            self.assertRegex(err, r"^usage: dataset-client")  # the same shape as any bad value
            self.assertNotIn("_seconds", err)
        self.assertEqual(self.requests, [], "nothing sent")
        status, out, _ = self.run_main("export", "--help")
        self.assertEqual(status, 0)
        self.assertIn("--format {parquet,csv,jsonl}", out)
        for command in ("query", "export", "download", "completion"):
            with self.subTest(command=command):
                _, out, _ = self.run_main(command, "--help")
                listed = out.split("positional arguments:\n", 1)[1].split("\n\n", 1)[0].splitlines()
                positionals = [
                    line for line in listed if not line.startswith("   ")
                ]  # not a wrapped help line
                self.assertTrue(positionals)
                self.assertTrue(
                    all(len(line.split(None, 1)) == 2 for line in positionals), positionals
                )

    def test_limit_rate_0_means_no_limit(self) -> None:
        self.server.default = serve_file(DATA)
        target = self.tmp() / "out.bin"
        with mock.patch.object(
            dc.DatasetClient, "download", autospec=True, side_effect=dc.DatasetClient.download
        ) as called:
            status, _, err = self.run_main(
                "-q", "download", "/api/files/x", str(target), "--limit-rate", "0"
            )
        self.assertEqual((status, err, target.read_bytes()), (0, "", DATA))
        self.assertNotIn("max_rate", called.call_args.kwargs)
        self.assertEqual([r.path for r in self.requests], ["/api/files/x"])


class ProfileTests(StandInTestCase):
    """Profiles and variables: which setting wins, and where each came from."""

    def test_profiles(self) -> None:
        other = self.server.url + "/api"
        self.server.default = reply(body=[{"name": "scripted"}])
        config = self.tmp() / "config.toml"
        config.write_text(
            f'[default]\nbase_url = "{self.base_url}"\napi_key = "stand-in-key"\n\n'
            f'[staging]\nbase_url = "{other}"\napi_key = "{KEY}"\ntimeout = 5\n'
        )
        config.chmod(0o600)
        chosen = {"DATASET_CLIENT_CONFIG": str(config)}

        def names(*argv: str, **environment: str) -> list[str]:
            status, out, err = self.run_main(
                *argv, "--output", "json", "datasets", environment={**chosen, **environment}
            )
            self.assertEqual(status, 0, err)
            return [dataset["name"] for dataset in json.loads(out)]

        self.assertEqual(names(), ["daily_bars", "trades"], "[default]")
        self.assertEqual(names("--profile", "staging"), ["scripted"])
        self.assertEqual(self.requests[-1].headers["Authorization"], f"Bearer {KEY}")
        self.assertEqual(names(DATASET_CLIENT_PROFILE="staging"), ["scripted"])
        self.assertEqual(
            names(DATASET_CLIENT_BASE_URL=other), ["scripted"], "a variable beats the file"
        )
        self.assertIsNone(
            self.requests[-1].headers["Authorization"],
            "[default]'s key is for its own base_url only",
        )
        self.server.script.append(reply(401, {"message": "missing or wrong API key"}))
        status, _, err = self.run_main(
            "datasets", environment={**chosen, "DATASET_CLIENT_BASE_URL": other}
        )
        self.assertEqual(
            (status, err),
            (
                1,
                f"dataset-client: error: 401 Unauthorized: GET {other}/datasets: missing or wrong API key "
                "(DATASET_CLIENT_API_KEY is not set; the profile's api_key goes only to its own base_url)\n",
            ),
        )
        self.assertEqual(
            names(
                DATASET_CLIENT_PROFILE="staging",
                DATASET_CLIENT_API_KEY="stand-in-key",
                DATASET_CLIENT_BASE_URL=self.base_url,
            ),
            ["daily_bars", "trades"],
        )
        self.assertEqual(
            names("--base-url", other, DATASET_CLIENT_BASE_URL=self.base_url),
            ["scripted"],
            "an option beats a variable",
        )
        home = self.tmp()  # the file's usual place
        (home / ".config" / "dataset-client").mkdir(parents=True)
        os.link(config, home / ".config" / "dataset-client" / "config.toml")
        status, out, err = self.run_main(
            "--profile", "staging", "datasets", environment={"HOME": str(home)}
        )
        self.assertEqual((status, json.loads(out)), (0, [{"name": "scripted"}]), err)
        for argv, environment, text in (
            (
                ["--profile", "prod"],
                chosen,
                f"no profile 'prod' in {config}; its profiles: default, staging",
            ),
            (
                [],
                {"DATASET_CLIENT_PROFILE": "prod", "HOME": str(home)},
                f"no profile 'prod' in {home}/.config/dataset-client/config.toml; its profiles: default, staging",
            ),
            (
                ["--profile", "staging"],
                {"DATASET_CLIENT_CONFIG": str(home / "none.toml")},
                f"no config file {home}/none.toml for --profile staging",
            ),
        ):
            with self.subTest(argv=argv, environment=environment):
                status, _, err = self.run_main(*argv, "datasets", environment=environment)
                self.assertEqual((status, err), (2, f"dataset-client: error: {text}\n"))
        config.chmod(0o640)
        status, _, err = self.run_main("datasets", environment=chosen)
        self.assertEqual(
            (status, err),
            (
                2,
                f"dataset-client: error: {config} holds an api_key and is readable by others: run chmod 600 {config}\n",
            ),
        )
        config.write_text('[default]\nbase-url = "http://x"\n')
        status, _, err = self.run_main("datasets", environment=chosen)
        self.assertEqual(status, 2)  # a warning, then: no service address
        self.assertIn("unknown key 'base-url' in [default]", err)
        self.assertIn("(ignored): did you mean 'base_url'?", err)

    def test_settings_are_read_once_say_where_each_came_from_and_hand_the_library_only_what_was_set(
        self,
    ) -> None:
        self.server.default = reply(body=[{"name": "scripted"}])
        config = self.tmp() / "config.toml"
        config.write_text(
            f'[staging]\nbase_url = "{self.server.url}/api"\napi_key = "{KEY}"\ntimeout = 0\n'
        )
        config.chmod(0o600)
        chosen = {"DATASET_CLIENT_CONFIG": str(config), "DATASET_CLIENT_PROFILE": "staging"}
        kept = {k: v for k, v in os.environ.items() if not k.startswith(self.cli_unset)}
        with mock.patch.dict(os.environ, {**kept, **chosen}, clear=True):
            argv = ["--retries", "0", "--output", "csv", "download", "/files/x.csv", "-c"]
            settings = cli._read_settings(cli._parse_arguments(argv), print)
        with mock.patch.dict(
            os.environ, {**kept, "HOME": str(self.tmp())}, clear=True
        ):  # no profile at all
            bare = cli._read_settings(
                cli._parse_arguments(["--base-url", self.base_url, "datasets"]), print
            )
        where = f"[staging] in {config}"
        self.assertEqual(
            settings.client_options, {"timeout": None, "max_retries": 0}
        )  # timeout 0: no limit
        self.assertEqual(
            settings.sources,
            {
                **{"base_url": where, "api_key": where, "timeout": where},
                **{"max_retries": "--retries", "deadline": "default", "ca_bundle": "default"},
            },
        )
        self.assertEqual(
            (
                settings.command,
                settings.url,
                settings.resume,
                settings.connections,
                settings.output,
                settings.api_key,
            ),
            ("download", "/files/x.csv", True, 1, "csv", KEY),
        )
        self.assertNotIn(KEY, repr(settings))
        with self.assertRaises(AttributeError):
            settings.resume = False  # type: ignore[misc]
        self.assertEqual((bare.client_options, bare.sources["timeout"]), ({}, "default"))
        with cli._open_client(bare) as client:  # the library's own defaults, said there alone
            self.assertEqual(
                (client._arguments["timeout"], client._arguments["max_retries"]), (30.0, 2)
            )
        status, out, err = self.run_main("--output", "json", "datasets", environment=chosen)
        self.assertEqual((status, json.loads(out)), (0, [{"name": "scripted"}]), err)
        self.assertEqual(self.requests[-1].path, "/api/datasets")
        self.assertEqual(
            self.requests[-1].headers["Authorization"], f"Bearer {KEY}"
        )  # the profile's key, sent


class ProfileErrorTests(ScriptedCommandLineTestCase):
    """What a profile's reader says of what it ignored or refused."""

    def test_a_profile_says_what_it_ignored_and_where_it_looked(self) -> None:
        xdg, home = self.tmp(), self.tmp()
        for directory, base_url in (
            (xdg, self.server.url + "/api"),
            (home / ".config", self.server.url + "/home"),
        ):
            (directory / "dataset-client").mkdir(parents=True)
            config = directory / "dataset-client" / "config.toml"
            config.write_text(
                f'[default]\nbase_url = "{base_url}"\ntimout = 5\ncolour = "red"\n[other]\nx = 1\n'
            )
            config.chmod(0o600)
        found = xdg / "dataset-client" / "config.toml"
        self.script(reply(body=[]), reply(body=[]))
        environment = {
            "XDG_CONFIG_HOME": str(xdg),
            "HOME": str(home),
            "DATASET_CLIENT_API_KEY": KEY,
        }
        status, out, err = self.run_main("datasets", environment=environment)
        self.assertEqual((status, out), (0, "[]\n"))
        self.assertEqual(
            err.splitlines(),
            [
                f"dataset-client: warning: unknown key 'colour' in [default] in {found} (ignored): "
                "known keys: base_url, api_key, ca_bundle, timeout",
                f"dataset-client: warning: unknown key 'timout' in [default] in {found} (ignored): "
                "did you mean 'timeout'?",
            ],
        )  # [other], not the profile used, says nothing
        self.assertEqual(
            [r.path for r in self.requests], ["/api/datasets"], "$XDG_CONFIG_HOME's file was read"
        )
        relative = {
            **environment,
            "XDG_CONFIG_HOME": "relative/dir",
        }  # not absolute: ignored, as the spec says
        status, _, err = self.run_main("datasets", environment=relative)
        self.assertEqual(status, 0)
        self.assertIn(f"in {home}/.config/dataset-client/config.toml (ignored)", err)
        self.assertEqual(self.requests[-1].path, "/home/datasets")
        nowhere = self.tmp()
        for argv, variables in (
            (["--profile", "staging"], {}),
            ([], {"DATASET_CLIENT_PROFILE": "staging"}),
        ):
            with self.subTest(argv=argv, variables=variables):
                status, out, err = self.run_main(
                    *argv,
                    "datasets",
                    environment={**environment, **variables, "XDG_CONFIG_HOME": str(nowhere)},
                )
                self.assertEqual((status, out), (2, ""))
                self.assertEqual(
                    err,
                    f"dataset-client: error: no config file {nowhere}/dataset-client/config.toml"
                    " for --profile staging\n",
                )
        self.assertEqual(len(self.requests), 2, "nothing sent for a usage error")

    def test_a_profile_s_api_key_of_the_wrong_type_is_refused_without_showing_it(self) -> None:
        # Found in review2: an unquoted numeric token (api_key = 123456789012345, an integer in TOML) was
        # printed whole in the error that said it must be a string.
        config = self.tmp() / "config.toml"
        for value in (
            "123456789012345",
            '["sk-listed-0123456789"]',
            "{ key = 'sk-table-0123456789' }",
        ):
            with self.subTest(value=value):
                config.write_text(f'[default]\nbase_url = "{self.server.url}"\napi_key = {value}\n')
                config.chmod(0o600)
                status, out, err = self.run_main(
                    "datasets", environment={"DATASET_CLIENT_CONFIG": str(config)}
                )
                kind = {"1": "an integer", "[": "an array", "{": "a table"}[value[0]]
                said = f"dataset-client: error: api_key in [default] in {config} must be a non-empty string, not {kind}\n"
                self.assertEqual((status, out, err), (2, "", said))
                self.assertEqual(self.requests, [], "nothing sent")
