"""The ``dataset-client`` command line, on the library ``dataset_client.py`` (Python 3.11+, the
standard library only): copy it beside that file (or ``pip install .`` a checkout) and run
``python3 -m dataset_client --help``. Licence: MIT. Copyright (c) 2026 the dataset-client authors.
"""

from __future__ import annotations

import sys

if sys.version_info < (3, 11):  # noqa: UP036 (one clear line instead of a traceback)
    _python = ".".join(map(str, sys.version_info[:3]))
    sys.stderr.write(
        "dataset-client: error: dataset_client needs Python 3.11 or later;"
        f" this is Python {_python}\n"
    )
    raise SystemExit(2)

import _thread
import argparse
import contextlib
import datetime
import functools
import hashlib
import io
import json
import logging
import math
import os
import re
import shlex
import shutil
import signal
import stat
import threading
import time
import types
import urllib.parse
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, NoReturn

# The library's version too: the two files are one release, and each checks the other's.
__version__ = "1.1.0"


def _load_library_beside() -> None:
    """Run as a file or with -m: the dataset_client.py beside this file (-I leaves it off sys.path),
    from its source, if the library's rule for it (_refusal_to_run) allows; none: the installed."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dataset_client.py")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    failure = ""
    try:
        status = os.lstat(path)
        fd = os.open(path, flags | getattr(os, "O_BINARY", 0))
        # A FIFO or a device is opened without waiting, and never read.
        status = os.fstat(fd)
    except (FileNotFoundError, NotADirectoryError):
        # None there (beside a zip's module: ENOTDIR), or gone since lstat (another user's loop).
        return
    except OSError as exc:
        # A symbolic link (ELOOP), or not the user's to read: why, as lstat found it.
        failure = exc.strerror or str(exc)
    mode, posix = status.st_mode, hasattr(os, "geteuid")
    writable = f"writable by group or others; run chmod go-w {shlex.quote(path)}"
    faults = (
        (stat.S_ISLNK(mode), "a symbolic link"),
        (not stat.S_ISREG(mode), "not a regular file"),
        (posix and status.st_uid not in (0, os.geteuid()), "another user's file"),
        (status.st_nlink > 1, f"a file with {status.st_nlink} links"),
        (posix and mode & (0o002 if status.st_gid == os.getegid() else 0o022), writable),
        (failure, failure),
    )
    why = next((why for fault, why in faults if fault), "")
    if why:
        _exit_saying(f"{path} is not run (owner: uid {status.st_uid}): {why}")
    library = sys.modules["dataset_client"] = types.ModuleType("dataset_client")
    library.__file__ = path
    try:
        with open(fd, "rb") as file:
            exec(compile(file.read(), path, "exec", dont_inherit=True), vars(library))
        # Cut short, or a later Python's: a SyntaxError, a NameError, no main() at its end.
        library.main  # noqa: B018
    except Exception as exc:
        _exit_saying(f"{path} is not run: {type(exc).__name__}: {exc}")


def _exit_saying(text: str) -> NoReturn:
    sys.stderr.write(f"dataset-client: error: {text}\n")
    raise SystemExit(2)


if __name__ == "__main__" and "dataset_client" not in sys.modules:
    _load_library_beside()
try:
    import dataset_client
except ModuleNotFoundError as missing:
    if missing.name != "dataset_client":
        raise
    lone = "dataset_client_cli.py needs dataset_client.py beside it: copy it there"
    _exit_saying(f"{lone}, or run pip install . in a checkout")
if __name__ == "__main__" and dataset_client.__version__ != __version__:
    library = f"{dataset_client.__file__} is version {dataset_client.__version__}"
    _exit_saying(f"{library}, not {__version__}: copy the two together")
# The public API, and three private names of the library, each with its reason (at most three).
from dataset_client import (  # noqa: E402 (once the library beside this file is loaded)
    # The characters never shown as sent: the library's set, escaped here on every line.
    _UNSEEN,
    DatasetClient,
    DatasetClientError,
    InvalidResponseError,
    NetworkError,
    RequestTimeoutError,
    ServiceError,
    # The partial file a -c download keeps, named as the download names it; whether the file is
    # already there, the user's own, with the expected sha256 (the library's owner check).
    _PartialFile,
    # Sizes for people (1.5 MiB), as the library's own messages say them.
    _size,
)

_EXIT_OK = 0
_EXIT_SERVICE_ERROR = 1
_EXIT_USAGE = 2
_EXIT_NETWORK_ERROR = 3
# The library's argument names as the command line's user gave them (settings: see _cli_words).
_CLI_NAMES = {
    "base_url": "--base-url",
    "api_key": "DATASET_CLIENT_API_KEY",
    "timeout": "--timeout",
    "max_retries": "--retries",
    "connections": "--connections",
    "max_rate": "--limit-rate",
    "deadline": "--max-time",
    "min_rate": "--speed-limit",
    "download_url": "URL",
    "destination": "DEST",
    "sha256": "--sha256",
    "dataset": "DATASET",
    "symbols": "--symbols",
    "start_date": "--start",
    "end_date": "--end",
    "format": "--format",
    "sql": "SQL",
    "ca_bundle": "--ca-bundle",
    "profile": "--profile",
}
# The options that set DatasetClient's keyword arguments (they beat the profile).
_CLIENT_OPTIONS = ("timeout", "max_retries", "deadline", "ca_bundle")
# The options read with the variables and the profile (their dests: their names after "--").
_OPTIONS = {name: _CLI_NAMES[name] for name in ("base_url", *_CLIENT_OPTIONS)}
_OUTPUTS = ("table", "json", "jsonl", "csv")
_FORMATS = ("parquet", "csv", "jsonl")
_SHELLS = ("bash", "zsh")
_CLI_HELP = """\
The key is read from $DATASET_CLIENT_API_KEY (or a profile), never from the
command line, where ps shows it. --base-url defaults to
$DATASET_CLIENT_BASE_URL, then the profile's base_url; downloading an absolute
URL needs no service address (and sends the key nowhere). Options may come
before or after the command.

Profiles: ~/.config/dataset-client/config.toml ($XDG_CONFIG_HOME when set, or
$DATASET_CLIENT_CONFIG) holds [default], [staging], ... with base_url, api_key,
ca_bundle, timeout; --profile NAME or $DATASET_CLIENT_PROFILE picks one.
Options beat variables, variables beat the file.

Results: a table when stdout is a terminal, else JSON (exactly what the service
sent); --output csv|jsonl|table|json chooses. An export, or datasets NAME, is
a field | value block there. Output taller than the terminal goes through
$DATASET_CLIENT_PAGER, else $PAGER, else less -FRX (--no-pager: never).

Exit status: 0 ok, 1 service error (or a checksum or file that failed), 2 usage
error, 3 network error, 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP.

"dataset-client COMMAND --help" shows a command's own options and examples.
"""
_GLOBAL_OPTIONS_HINT = (
    "\nGlobal options (--base-url, --profile, --output, -v, -q, ...) go before or\n"
    "after the command: see dataset-client --help.\n"
)


class _UsageError(Exception):
    """A command line that cannot run as given: exit status 2."""


class _Refused(Exception):
    """What cannot be done as asked (a file not to replace, no such dataset): exit status 1."""


class _Stopped(BaseException):
    """SIGTERM or SIGHUP (its number): unwinds as Ctrl-C does, so downloads clean up."""


# --- A run: main, parsing the command line, the settings, errors in the command line's words ---


def main(argv: list[str] | None = None) -> int:
    """Run the ``dataset-client`` command; return its exit status (``--help`` says which)."""
    with _closed_streams_replaced():
        return _main(argv)


@contextlib.contextmanager
def _closed_streams_replaced() -> Iterator[None]:
    """A standard stream closed (``>&-``: None in Python) is /dev/null on its descriptor for the
    run, which no file or socket then takes; stdout's is read-only: writing fails (EBADF)."""
    closed = [name for name in ("stdin", "stdout", "stderr") if getattr(sys, name) is None]
    for name in closed:
        fd = os.open(os.devnull, os.O_WRONLY if name == "stderr" else os.O_RDONLY)
        stream = open(fd, "r" if name == "stdin" else "w", encoding="utf-8")  # noqa: SIM115
        setattr(sys, name, stream)
    try:
        yield
    finally:
        for name in closed:
            # What stdout could not write is lost with it: the run's error is said already.
            with contextlib.suppress(OSError):
                getattr(sys, name).close()
            setattr(sys, name, None)


def _main(argv: list[str] | None) -> int:
    try:
        namespace = _parse_arguments(argv)
    except SystemExit as exit:
        # --help, --version, or a usage error, which argparse has printed.
        return exit.code if isinstance(exit.code, int) else _EXIT_USAGE
    verbose = getattr(namespace, "verbose", False)
    stderr = _Stderr(quiet=getattr(namespace, "quiet", False), verbose=verbose)
    logger = logging.getLogger("dataset_client")
    level = logger.level
    # The library logs each request at DEBUG (-v), a resume at INFO.
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.addHandler(stderr)

    def stop(signal_number: int, frame: object) -> None:
        raise _Stopped(signal_number)

    # The handlers to put back: main() also runs inside other programs, and tests.
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            number = getattr(signal, name, None)
            # A signal ignored (as nohup ignores SIGHUP) stays ignored.
            if number is not None and signal.getsignal(number) != signal.SIG_IGN:
                previous[number] = signal.signal(number, stop)
    try:
        return _run_command(namespace, stderr)
    except _Stopped as stopped:
        stderr.error(f"stopped by {signal.Signals(stopped.args[0]).name}{_hint(stopped)}")
        return 128 + int(stopped.args[0])
    except KeyboardInterrupt as interrupt:
        stderr.error(f"interrupted{_hint(interrupt)}")
        return 130
    finally:
        for number, action in previous.items():
            signal.signal(number, action)
        logger.removeHandler(stderr)
        logger.setLevel(level)
        stderr.close()


def _run_command(namespace: argparse.Namespace, stderr: _Stderr) -> int:
    """Run the parsed command; turn what goes wrong into a one-line message and an exit status."""
    settings = None
    try:
        run = _COMMANDS[namespace.command].run
        # Completion reads no variable and no profile.
        if run is None:
            sys.stdout.write(_completion_script(namespace.shell, _build_parser()))
            sys.stdout.flush()
            return _EXIT_OK
        settings = _read_settings(namespace, stderr.warning)
        with _open_client(settings) as client:
            # No line shows what the client holds secret, whatever the line says.
            stderr.redact = client.redact
            run(client, settings, stderr)
        return _EXIT_OK
    except (NetworkError, RequestTimeoutError) as exc:
        return stderr.error(_error_text(exc) + _hint(exc), _EXIT_NETWORK_ERROR)
    except DatasetClientError as exc:
        return stderr.error(_error_text(exc, settings))
    except _Refused as exc:
        return stderr.error(str(exc))
    except _UsageError as exc:
        return stderr.error(str(exc), _EXIT_USAGE)
    except (TypeError, ValueError) as exc:
        # The library refused an argument, before anything was sent.
        return stderr.error(_in_cli_terms(exc, settings), _EXIT_USAGE)
    except BrokenPipeError as exc:
        # stdout closed early, as by `| head` (a file's error names the file: _noted).
        if exc.filename in (None, "-"):
            # Its reader is gone: the rest to /dev/null, else the last flush fails again (exit 120).
            with contextlib.suppress(OSError, ValueError):
                stdout = sys.stdout.fileno()
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, stdout)
                os.close(null)
            return _EXIT_OK
        return stderr.error(f"cannot write {exc.filename}: its reader went away ({exc.strerror})")
    except OSError as exc:
        return stderr.error(f"cannot write {exc.filename or 'stdout'}: {exc.strerror or exc}")


def _parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line: options not given are absent (_read_settings fills them in)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    parser = _build_parser(arguments)
    command, unknown = _unknown_option(parser, arguments)
    if unknown:
        # The usage of the command it was given to, then what was wrong.
        (_command_parsers(parser)[command] if command else parser).print_usage(sys.stderr)
        parser.exit(_EXIT_USAGE, f"{parser.prog}: error: {unknown}\n")
    namespace = parser.parse_args(arguments)
    if getattr(namespace, "verbose", False) and getattr(namespace, "quiet", False):
        parser.error("argument -q/--quiet: not allowed with argument -v/--verbose")
    stalled = _rates_that_stall(namespace)
    if stalled:
        _command_parsers(parser)[namespace.command].error(stalled)
    return namespace


def _rates_that_stall(namespace: argparse.Namespace) -> str | None:
    """The usage error of a --limit-rate whose share per connection is below --speed-limit (every
    connection would be judged stalled: docs/DESIGN.md); None when the rates agree."""
    limit, floor = getattr(namespace, "limit_rate", None), getattr(namespace, "speed_limit", None)
    connections = getattr(namespace, "connections", 1)
    if not limit or not floor or limit >= floor * connections:
        return None
    rates = f"--limit-rate {_size(limit)}/s is below --speed-limit {_size(floor)}/s"
    if connections > 1:
        rates += f" times --connections {connections}"
    lower = "--speed-limit or --connections" if connections > 1 else "--speed-limit"
    return f"{rates}: every connection would stall; raise --limit-rate or lower {lower}"


class _Parser(argparse.ArgumentParser):
    """Its usage errors name the nearest choice, and what --download took (``words``: argv)."""

    def __init__(self, *args: Any, words: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.words = words or []

    def error(self, message: str) -> NoReturn:
        # DATASET is missing when --download took the word meant for it as its DEST.
        words = self.words
        taken = words[words.index("--download") + 1 :][:1] if "--download" in words else []
        if taken and not taken[0].startswith("-") and re.search(r"required: .*\bDATASET", message):
            word = _printable(taken[0])
            message += f" (--download took {word!r} as its DEST: give DATASET first, as in"
            message += f" export {word} ... --download)"
        super().error(_with_suggestion(message))


def _build_parser(words: list[str] | None = None) -> argparse.ArgumentParser:
    raw, suppress = argparse.RawDescriptionHelpFormatter, argparse.SUPPRESS
    parser = _Parser(
        prog="dataset-client",
        description="Query the dataset service, create exports and download them.",
        epilog=_CLI_HELP,
        formatter_class=raw,
        argument_default=suppress,
    )
    _add_global_options(parser, hidden=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    for name, command in _COMMANDS.items():
        lines = [line for example in command.examples for line in example.splitlines()]
        epilog = "examples:\n" + "".join(f"  {line}\n" for line in lines) + _GLOBAL_OPTIONS_HINT
        made = commands.add_parser(
            name,
            help=command.summary,
            description=command.description,
            epilog=epilog,
            formatter_class=raw,
            argument_default=suppress,
            words=words,
        )
        # Global options are accepted after the command too, and listed once (in --help).
        _add_global_options(made, hidden=True)
        command.add_arguments(made)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, *, hidden: bool) -> None:
    """The options of every command; ``hidden``: accepted but left out of a command's own --help."""

    def shown(text: str) -> str:
        return argparse.SUPPRESS if hidden else text

    add = parser.add_argument
    base_url = "service address (default: $DATASET_CLIENT_BASE_URL)"
    add("--base-url", metavar="URL", help=shown(base_url))
    add("--profile", metavar="NAME", help=shown("a table of the config file (default: [default])"))
    add("--ca-bundle", metavar="FILE", help=shown("also trust the CA certificates in FILE"))
    timeout = "seconds per connect or read; 0: no limit (default: 30)"
    add("--timeout", metavar="S", type=_seconds, help=shown(timeout))
    max_time = "seconds a request may take in all, retries and waits included (default: no limit)"
    add("--max-time", metavar="S", type=_seconds, help=shown(max_time))
    retries = "times a failed request is retried (default: 2)"
    add("--retries", metavar="N", type=_at_least(0), help=shown(retries))
    output = "how results are printed (default: table on a terminal, else json)"
    add("--output", choices=_OUTPUTS, help=shown(output))
    no_pager = "never page long output (default: $DATASET_CLIENT_PAGER, $PAGER, or less -FRX)"
    add("--no-pager", action="store_true", help=shown(no_pager))
    # argparse cannot draw the usage of a group whose options are all hidden: _parse_arguments
    # checks -v with -q.
    loudness = parser if hidden else parser.add_mutually_exclusive_group()
    verbose = "a stderr line per request, retry, resume"
    loudness.add_argument("-v", "--verbose", action="store_true", help=shown(verbose))
    loudness.add_argument("-q", "--quiet", action="store_true", help=shown("errors only"))


def _unknown_option(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[str | None, str]:
    """The command met so far (or None) and ``unknown option '--outptu' (did you mean '--output'?)``
    for the first option it and the parser do not know, else "": argparse would take its value."""
    known, commands = _options_of(parser), _command_parsers(parser)
    command, pending = None, 0
    for word in argv:
        if pending == 1 or (pending == -1 and (word == "-" or not word.startswith("-"))):
            # The option's value, whatever it looks like, is no option.
            pending = 0
            continue
        pending = 0
        if word == "--":
            break
        if command is None and word in commands:
            command, known = word, {**known, **_options_of(commands[word])}
        elif command is None and not word.startswith("-"):
            # The command word, mistyped: argparse blames it, not the options after it.
            break
        if word == "-" or not word.startswith("-") or re.fullmatch(r"-\d[\d.]*", word):
            continue
        name = word.split("=", 1)[0]
        found = _known_option(name, known)
        if found is None:
            nearest = _nearest_option(name, list(known))
            return command, f"unknown option {_printable(name)!r}{nearest}"
        pending = 0 if "=" in word else known[found]
    return command, ""


def _nearest_option(name: str, options: list[str]) -> str:
    """`` (did you mean '--output'?)`` for ``--outptu`` or ``-o`` (``--start`` for ``--from``);
    where the key comes from for ``--api-key``; empty when none is near."""
    import difflib

    long_options = [option for option in options if option.startswith("--")]
    # What other tools call them.
    meant = {"--from": "--start", "--to": "--end"}.get(name)
    if meant in long_options:
        return f" (did you mean {meant!r}?)"
    nearest = difflib.get_close_matches(name, [*long_options, "--api-key"], n=1)
    if nearest == ["--api-key"]:
        where = "DATASET_CLIENT_API_KEY or a profile's api_key"
        return f": the key comes from {where}, never from the command line, where ps shows it"
    if not nearest and len(name) == 2:
        nearest = [option for option in long_options if option[2] == name[1]][:1]
    return f" (did you mean {nearest[0]!r}?)" if nearest else ""


def _options_of(parser: argparse.ArgumentParser) -> dict[str, int]:
    """Each option of ``parser`` (not its commands') and the values it takes: 0, 1, -1 (0 or 1)."""
    values: dict[int | str | None, int] = {None: 1, "?": -1}
    return {name: values.get(a.nargs, 0) for a in parser._actions for name in a.option_strings}


def _known_option(name: str, known: dict[str, int]) -> str | None:
    """The option ``name`` stands for: itself, the long option it begins (as argparse allows), or
    the last of a run of short flags (``-vc``); None when none."""
    if name in known:
        return name
    if name.startswith("--"):
        return next((option for option in known if option.startswith(name)), None)
    flags = [f"-{letter}" for letter in name[1:]]
    return flags[-1] if all(flag in known for flag in flags) else None


def _command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    subparsers = argparse._SubParsersAction
    return next(action for action in parser._actions if isinstance(action, subparsers)).choices


def _with_suggestion(message: str) -> str:
    """argparse's message for a choice it does not know, with the nearest one it does."""
    import difflib

    # 3.15's argparse adds ", maybe you meant 'x'?" before the choices: one wording on every Python.
    found = re.match(
        r"argument (\S+): invalid choice: '([^']*)'(?:, maybe you meant '[^']*'\?)?"
        r" \(choose from (.*)\)$",
        message,
    )
    if not found:
        return message
    choices = re.findall(r"[\w-]+", found[3])
    nearest = difflib.get_close_matches(found[2], choices, n=1)
    what = "command" if found[1] == "COMMAND" else f"{found[1]} value"
    guess = f"did you mean {nearest[0]!r}?" if nearest else f"choose from {', '.join(choices)}"
    return f"unknown {what} {_printable(found[2])!r}: {guess}"


def _seconds(text: str) -> float | None:
    """Seconds, 0 or more (0: no limit: None)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    # 400 digits make inf, which is no number of seconds.
    if not 0 <= value < math.inf:
        message = f"invalid value {_value_shown(text)!r}: give seconds, 0 or more (0: no limit)"
        raise argparse.ArgumentTypeError(message)
    return value or None


def _at_least(least: int, most: int = 1_000_000) -> Callable[[str], int]:
    """A whole number from ``least`` to ``most`` (more retries than any wait is worth)."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            # Not a whole number, or one of over 4,300 digits (int() refuses them).
            value = least - 1
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(f"must be {least} to {most}, got {_value_shown(text)}")
        return value

    return check


def _value_shown(text: str) -> str:
    """A value given on the command line, cut when long (400 digits), as a message repeats it."""
    return text if len(text) <= 24 else text[:23] + "\u2026"


def _date(text: str) -> datetime.date:
    for parse in (datetime.date.fromisoformat, datetime.datetime.fromisoformat):
        with contextlib.suppress(ValueError):
            return parse(text)
    raise argparse.ArgumentTypeError(f"invalid date {text!r}: {_wrong_part(text)}")


def _wrong_part(text: str) -> str:
    """Which part of a YYYY-MM-DD date does not exist (``there is no month 13``); else the shape."""
    found = re.match(r"(\d{4})-(\d\d)-(\d\d)(?:$|[T ])", text)
    if not found:
        return "use YYYY-MM-DD"
    year, month, day = map(int, found.groups())
    for value, most, part in ((year, 9999, "year"), (month, 12, "month"), (day, 31, "day")):
        if not 1 <= value <= most:
            return f"there is no {part} {value}"
    import calendar

    # Months named in English whatever the locale, as every message is.
    if day > calendar.monthrange(year, month)[1]:
        name = (
            "January February March April May June July August September October November December"
        )
        return f"there is no {day} {name.split()[month - 1]} {year}"
    return "use YYYY-MM-DD"


def _rate(text: str) -> float:
    """Bytes per second as curl's --limit-rate takes them: a number, then K, M or G (of 1024)."""
    found = re.fullmatch(r"(\d+(?:\.\d*)?)([kKmMgG]?)", text.strip())
    value = float(found[1]) * 1024 ** " kmg".index((found[2] or " ").lower()) if found else -1.0
    # 0 is no limit; under a byte a second, a download would never end.
    if not (value == 0 or 1 <= value < math.inf):
        shown = f"invalid rate {_value_shown(text)!r}"
        raise argparse.ArgumentTypeError(f"{shown}: bytes per second, such as 500K, 10M or 1G")
    return value


class _Settings(types.SimpleNamespace):
    """What one run was asked to do, read once (_read_settings) and never changed: the parsed
    command line (the other commands' arguments keep the defaults below; export --download's
    ``download`` is "" for the file's own name); the service's address and key (``key_withheld``:
    none, the profile's being for another base_url); ``client_options``, DatasetClient's keyword
    arguments the user set; ``sources``, where each came from (an option, variable, profile)."""

    command: str
    output: str
    no_pager: bool = False
    verbose: bool = False
    quiet: bool = False
    sql: str
    dataset: str
    symbols: str
    start: datetime.date
    end: datetime.date
    format: str | None = None
    name: str | None = None
    download: str | None = None
    url: str
    destination: str | None = None
    sha256: str | None = None
    resume: bool = False
    connections: int = 1
    limit_rate: float | None = None
    speed_limit: float | None = None
    base_url: str | None = None
    api_key: str | None = None
    key_withheld: bool = False
    client_options: Mapping[str, Any]
    sources: Mapping[str, str]

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"settings are read once: {name} cannot be changed")


def _read_settings(namespace: argparse.Namespace, warn: Callable[[str], object]) -> _Settings:
    """This run's settings: the options, then the variables, then the profile, as the library
    reads them (DatasetClient.read_settings; ``warn`` is told what in the profile was ignored)."""
    given = vars(namespace)
    dests = {name: option[2:].replace("-", "_") for name, option in _OPTIONS.items()}
    options = {name: given[dest] for name, dest in dests.items() if dest in given}
    if "ca_bundle" in options:
        options["ca_bundle"] = options["ca_bundle"] or None
    with warnings.catch_warnings(record=True) as ignored:
        warnings.simplefilter("always")
        try:
            found = DatasetClient.read_settings(given.get("profile"), **options)
        except (ValueError, PermissionError, LookupError) as exc:
            raise _UsageError(_in_cli_terms(exc)) from None
        finally:
            for warning in ignored:
                warn(str(warning.message))
    # The profile's key, meant for another service: none, said so in a 401's hint.
    withheld = found.get("api_key", ("", ""))[0] is None
    sources = {"api_key": "default" if withheld else found.get("api_key", (0, "default"))[1]}
    for name, option in _OPTIONS.items():
        where = found.get(name, (None, "default"))[1]
        sources[name] = option if where == "argument" else where
    # What was read with the settings is not kept as parsed.
    read = {"profile", *dests.values()}
    parsed = {name: value for name, value in given.items() if name not in read}
    return _Settings(
        **{**parsed, "output": given.get("output") or ("table" if sys.stdout.isatty() else "json")},
        base_url=found.get("base_url", (None,))[0],
        api_key=found.get("api_key", (None,))[0],
        key_withheld=withheld,
        client_options={name: found[name][0] for name in _CLIENT_OPTIONS if name in found},
        sources=sources,
    )


def _open_client(settings: _Settings) -> DatasetClient:
    """The client for this command; downloading an absolute URL needs no service address."""
    base_url, api_key = settings.base_url, settings.api_key
    if not base_url:
        # The origin as written: a URL the library refuses is named as the URL (_cli_words).
        origin = re.match(
            "(?i)https?://[^/?#]*", settings.url if settings.command == "download" else ""
        )
        if origin is None:
            lacking = "no service address: pass --base-url, set DATASET_CLIENT_BASE_URL"
            raise _UsageError(f"{lacking}, or give a profile a base_url")
        # The URL's own origin, and no key: the key goes nowhere.
        base_url, api_key = origin[0], None
    try:
        return DatasetClient(base_url, api_key, **settings.client_options)
    except OSError as exc:
        # ca_bundle could not be read (ssl.SSLError is an OSError).
        raise _UsageError(_in_cli_terms(exc, settings)) from None


def _hint(exc: BaseException) -> str:
    """What _noted added to ``exc``: where a download left its partial file, or that -c keeps it."""
    return "".join(note for note in getattr(exc, "__notes__", ()) if note.startswith("; "))


def _noted(exc: BaseException, target: str, hint: str) -> None:
    """Tell main and _run_command what a download into ``target`` stopped by ``exc`` left
    (``hint``) and, for a write that failed unnamed, which file it was."""
    if hint:
        exc.add_note(hint)
    if isinstance(exc, OSError) and not isinstance(exc, DatasetClientError) and not exc.filename:
        exc.filename = target


def _error_text(exc: DatasetClientError, settings: _Settings | None = None) -> str:
    """A library error in the command line's words, and what to do about it."""
    text = _in_cli_terms(exc, settings)
    if isinstance(exc, ServiceError):
        if exc.retry_after:
            text += f"; try again in {_duration(exc.retry_after)}"
        if exc.status == 401 and settings is not None:
            text += _key_hint(exc.url, settings)
        elif exc.status == 404 and settings is not None:
            text += _base_path_hint(exc, settings)
    elif isinstance(exc, NetworkError) and exc.certificate:
        text += "; if a private CA or a proxy signs it, pass --ca-bundle FILE or set SSL_CERT_FILE"
    return text


def _key_hint(url: str, settings: _Settings) -> str:
    """Why a 401 from ``url`` met no key: the variable is not set (or empty), and the profile has
    none (or another's); or the key goes only to the base URL's origin, and ``url`` is not of it."""
    if settings.api_key is not None:
        base, asked = urllib.parse.urlsplit(settings.base_url or ""), urllib.parse.urlsplit(url)
        if _origin(base) == _origin(asked):
            return ""
        there = f"{base.scheme}://{base.netloc}; give a URL there, or the path {asked.path} alone"
        where = there if settings.base_url else "and no --base-url is set"
        return f" (the key was not sent: it goes only to the base URL's origin, {where})"
    empty = os.environ.get("DATASET_CLIENT_API_KEY") == ""
    unset = f"DATASET_CLIENT_API_KEY is {'empty' if empty else 'not set'}"
    if settings.key_withheld:
        return f" ({unset}; the profile's api_key goes only to its own base_url)"
    profile = next((where for where in settings.sources.values() if where.startswith("[")), None)
    return f" ({unset}, and {profile} has no api_key)" if profile else f" ({unset})"


def _origin(parts: urllib.parse.SplitResult) -> tuple[str, str | None, int]:
    """A URL's origin, as the library compares them: the key goes to the base URL's alone."""
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


_ENDPOINTS = {"datasets": "/datasets", "query": "/query", "export": "/exports"}


def _base_path_hint(exc: ServiceError, settings: _Settings) -> str:
    """`` (check the path /api/v1 of --base-url)`` for a 404 of an endpoint every service has,
    under a base URL with a path; not when the service said it has no such dataset."""
    base = (settings.base_url or "").rstrip("/")
    path = urllib.parse.urlsplit(base).path
    endpoint = _ENDPOINTS.get(settings.command)
    told = settings.command == "export" and settings.dataset in (exc.message or "")
    if not path or endpoint is None or exc.url != base + endpoint or told:
        return ""
    return f" (check the path {path} of {_cli_words(exc, settings)['base_url']})"


def _in_cli_terms(exc: BaseException, settings: _Settings | None = None) -> str:
    """A library error in the command line's words: what it names (``exc.named``) as it says it."""
    words = _cli_words(exc, settings)
    if isinstance(exc, DatasetClientError):
        return exc.worded(**words)
    parts = list(getattr(exc, "parts", None) or [str(exc)])
    for name, at in getattr(exc, "named", {}).items():
        parts[at] = words.get(name, parts[at])
    return "".join(parts)


def _cli_words(exc: BaseException, settings: _Settings | None) -> dict[str, str]:
    """The command line's words for what the library's messages name: its options (a setting by
    where it came from: the option, the variable, a profile's [NAME] in FILE), sizes for people."""
    sources = {} if settings is None else settings.sources
    words = {**_CLI_NAMES, **_sizes_in_words(exc)}
    source = sources.get("base_url", "")
    if source.startswith("["):
        words["base_url"] = f"base_url in {source}"
    elif source:
        # The option or the variable by its name; neither ("default"): a download's URL gave it.
        words["base_url"] = "URL" if source == "default" else source
    if sources.get("ca_bundle", "").startswith("["):
        words["ca_bundle"] = f"ca_bundle in {sources['ca_bundle']}"
    if isinstance(exc, RequestTimeoutError) and exc.deadline is not None:
        words["deadline"] = f"--max-time {exc.deadline:g}"
    return words


def _sizes_in_words(exc: BaseException) -> dict[str, str]:
    """The byte counts an error names in sizes for people; "0 of ? bytes" is said as it is."""
    received, expected = getattr(exc, "received", None), getattr(exc, "expected", None)
    if received is None or not (received or expected is not None):
        return {}
    return {"received": _size(received), "expected": "?" if expected is None else _size(expected)}


# --- The commands: each one's arguments and run, then the table of them ---


def _add_datasets_arguments(datasets: argparse.ArgumentParser) -> None:
    shown = "a dataset's name: show it whole"
    datasets.add_argument("name", metavar="NAME", nargs="?", default=None, help=shown)


def _list_datasets(client: DatasetClient, settings: _Settings, stderr: _Stderr) -> None:
    listing = client.list_datasets()
    if settings.name is not None:
        listing = _named(listing, settings.name)
    _show(listing, client, settings, stderr)


def _named(listing: Any, name: str) -> Any:
    """The dataset ``name`` of the service's listing; _Refused (with the nearest name) if none."""
    import difflib

    listed = listing if isinstance(listing, list) else []
    items = [item for item in listed if isinstance(item, dict)]
    found = next((item for item in items if item.get("name") == name), None)
    if found is not None:
        return found
    names = [item["name"] for item in items if isinstance(item.get("name"), str)]
    folded = {known.casefold(): known for known in names}
    nearest = difflib.get_close_matches(name.casefold(), list(folded), n=1)
    if nearest:
        raise _Refused(f"no dataset {name!r} (did you mean {folded[nearest[0]]!r}?)")
    known = ", ".join(names)
    known = known if len(known) <= 200 else f"{known[:199]}\u2026 ({len(names)} in all)"
    raise _Refused(f"no dataset {name!r}; the datasets: {known}")


def _add_query_arguments(query: argparse.ArgumentParser) -> None:
    query.add_argument("sql", metavar="SQL", help="the SQL text, or - to read it from stdin")


def _run_query(client: DatasetClient, settings: _Settings, stderr: _Stderr) -> None:
    sql = sys.stdin.read() if settings.sql == "-" else settings.sql
    _show(client.query(sql), client, settings, stderr)


def _add_export_arguments(export: argparse.ArgumentParser) -> None:
    add = export.add_argument
    add("dataset", metavar="DATASET", help="the dataset's name, as the datasets command lists it")
    add("--symbols", required=True, help="comma-separated, e.g. AAPL,MSFT")
    add("--start", required=True, type=_date, help="first date, YYYY-MM-DD")
    add("--end", required=True, type=_date, help="last date, YYYY-MM-DD")
    formats = "the file's format (default: DEST's extension, else parquet)"
    add("--format", choices=_FORMATS, default=None, help=formats)
    download = "download the export's file too (default DEST: its name)"
    add("--download", nargs="?", const="", default=None, metavar="DEST", help=download)
    _add_download_options(export)


def _export(client: DatasetClient, settings: _Settings, stderr: _Stderr) -> None:
    """Create the export and print it; with --download, download its file too."""
    # Said before the export is made.
    if settings.download == "-" and settings.resume:
        raise _UsageError("-c needs a file to continue: not - (stdout)")
    result = _create_export(client, settings, _export_format(settings.format, settings.download))
    _show(result, client, settings, stderr)
    fields = result if isinstance(result, dict) else {}
    # The service may call the count as the query result does.
    if any(_is_number(fields.get(name)) and fields[name] == 0 for name in ("rows", "row_count")):
        stderr.warning(
            "the export holds no rows: check --symbols, --start and --end against"
            f" dataset-client datasets {shlex.quote(settings.dataset)}"
        )
    if settings.download is not None:
        url, digest = _export_file(client, result)
        _download_command(
            client, settings, stderr, url, settings.download or None, digest, server=True
        )


def _add_download_arguments(download: argparse.ArgumentParser) -> None:
    add = download.add_argument
    add("url", metavar="URL", help="absolute, or relative to the service address")
    dest = "a file, a directory, or - for stdout"
    add("destination", nargs="?", default=None, metavar="DEST", help=dest)
    add("--sha256", metavar="HEX", default=None, help="the hex digest the file must have")
    _add_download_options(download)


def _add_download_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    resume = "keep a partial file when interrupted: the same command run again continues it"
    add("-c", "--continue", dest="resume", action="store_true", default=False, help=resume)
    connections = "ranged requests at once for one file (default: 1)"
    add("--connections", metavar="N", type=_at_least(1, 32), default=1, help=connections)
    limit = "bytes per second at most, as curl: 500K, 10M, 1G (0: no limit)"
    add("--limit-rate", metavar="RATE", type=_rate, default=None, help=limit)
    floor = "a connection slower than RATE over --timeout seconds has stalled: resumed on a new one"
    add("--speed-limit", metavar="RATE", type=_rate, default=None, help=floor)


def _download(client: DatasetClient, settings: _Settings, stderr: _Stderr) -> None:
    _download_command(client, settings, stderr, settings.url, settings.destination, settings.sha256)


def _add_completion_arguments(completion: argparse.ArgumentParser) -> None:
    completion.add_argument("shell", choices=_SHELLS, help="the shell to complete for")


class _Command(NamedTuple):
    """A command: its help, how to add its arguments, how to run it (None: without a client, as
    completion), and what completes its operands (``files``: file names; else ``operands``)."""

    summary: str
    description: str
    examples: list[str]
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[DatasetClient, _Settings, _Stderr], None] | None
    operands: tuple[str, ...] = ()
    files: bool = False


# The commands, in the order --help lists them: adding one is adding its entry here.
_COMMANDS = {
    "datasets": _Command(
        "list the datasets, or show one",
        "List the datasets; with NAME, show that one, every field whole.",
        ["dataset-client datasets --output json", "dataset-client datasets daily_bars"],
        _add_datasets_arguments,
        _list_datasets,
    ),
    "query": _Command(
        "run an SQL query",
        "Run a read-only SQL query and print its result.",
        [
            "dataset-client query 'SELECT symbol, count(*) FROM trades GROUP BY 1'",
            "echo 'SELECT count(*) FROM trades' | dataset-client query - --output csv",
        ],
        _add_query_arguments,
        _run_query,
    ),
    "export": _Command(
        "create an export (and download it)",
        "Create an export and print it; with --download, also fetch its file\n"
        "(checked against its sha256).",
        [
            "dataset-client export daily_bars --symbols AAPL,MSFT \\\n"
            "    --start 2024-01-01 --end 2024-03-31 --download",
            "dataset-client export trades --symbols V --start 2024-01-02 \\\n"
            "    --end 2024-01-02 --format csv --download - > v.csv",
        ],
        _add_export_arguments,
        _export,
    ),
    "download": _Command(
        "download a file",
        "Download a file (an export's download_url), checked and atomic.\n"
        "An absolute URL needs no service.",
        [
            "dataset-client download https://example.com/files/bars.parquet -c \\\n"
            "    --limit-rate 10M",
            "dataset-client download /files/exp_1.csv out.csv --connections 4",
        ],
        _add_download_arguments,
        _download,
        files=True,
    ),
    "completion": _Command(
        "print a shell completion script",
        "Print a completion script for bash or zsh.",
        [
            'eval "$(dataset-client completion bash)"    # in ~/.bashrc',
            'eval "$(dataset-client completion zsh)"     # in ~/.zshrc, after compinit',
        ],
        _add_completion_arguments,
        None,
        operands=_SHELLS,
    ),
}


# --- What the commands use: showing a result, an export's format and file, a download ---


def _show(result: Any, client: DatasetClient, settings: _Settings, stderr: _Stderr) -> None:
    """Print a command's result as --output says (an export, datasets NAME: one record)."""
    # A retry's status line, still on the screen, goes before the result comes.
    stderr.close()
    one = settings.command == "export" or settings.name is not None
    # Room, for a while, to walk again (redact, print) a result json.loads nested near the limit.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(3 * limit)
    try:
        # A service that echoes the key never gets it shown; a result's signed URLs stay whole.
        shown = client.redact(result, signed_urls=False)
        # stdout holds the file alone: the export goes to stderr (a block on a terminal, else JSON).
        if settings.command == "export" and settings.download == "-":
            block = stderr.is_terminal and isinstance(shown, dict) and _export_fields(shown)
            if not settings.quiet and block:
                width = _terminal_size(stderr.stream, "columns")
                stderr.message("\n".join(_block_lines(block, width, spaceless=True)), raw=True)
            elif not settings.quiet:
                stderr.message(_json_text(shown, 2), raw=True)
            return
        if isinstance(shown, dict) and one:
            print_it = functools.partial(_print_record, shown, settings)
        else:
            print_it = functools.partial(_print_result, shown, settings.output)
        cut = isinstance(shown, dict) and not one and shown.get("truncated") is True
        said = 'the service cut this result short ("truncated": true)'
        if cut:
            stderr.warning(said)
        # Said again after a pager, whose screen took that line away.
        if _paged(print_it, allowed=not settings.no_pager, redact=client.redact) and cut:
            stderr.warning(said)
    finally:
        sys.setrecursionlimit(limit)


def _create_export(client: DatasetClient, args: _Settings, file_format: str) -> Any:
    """The export; with -c, its Idempotency-Key comes from the request: run again, the same one."""
    symbols = [symbol.strip() for symbol in args.symbols.split(",") if symbol.strip()]
    key = None
    if args.resume:
        request = [args.dataset, symbols, args.start.isoformat(), args.end.isoformat(), file_format]
        key = "dataset-client-" + hashlib.sha256(json.dumps(request).encode()).hexdigest()[:40]
    return client.create_export(
        args.dataset,
        symbols=symbols,
        start_date=args.start,
        end_date=args.end,
        format=file_format,
        idempotency_key=key,
    )


def _export_format(asked: str | None, destination: str | None) -> str:
    """--format, else the format DEST's extension names, else parquet; a --format that disagrees
    with DEST's extension is a usage error (the file would say one thing and hold another)."""
    named = None
    if destination and destination != "-" and not os.path.isdir(destination):
        extension = os.path.splitext(destination)[1].lower()[1:]
        named = extension if extension in _FORMATS else None
    if asked and named and asked != named:
        raise _UsageError(
            f"--format {asked} disagrees with DEST {destination!r}, a .{named} name: "
            f"drop --format, or give DEST a .{asked} name"
        )
    return asked or named or "parquet"


def _export_file(client: DatasetClient, export: Any) -> tuple[str, str | None]:
    """The export's download_url and (when it has a usable one) its sha256."""
    url = export.get("download_url") if isinstance(export, dict) else None
    if not isinstance(url, str) or not url:
        raise InvalidResponseError("the export has no download_url to download")
    # What the library would refuse is the service's fault here, not a usage error.
    try:
        client.resolve(url)
    except ValueError as exc:
        message = f"the export's download_url cannot be downloaded: {exc}"
        raise InvalidResponseError(message) from None
    digest = export.get("sha256")
    usable = isinstance(digest, str) and re.fullmatch("[0-9a-fA-F]{64}", digest)
    return url, digest if usable else None


def _download_command(
    client: DatasetClient,
    args: _Settings,
    stderr: _Stderr,
    url: str,
    destination: str | None,
    sha256: str | None,
    *,
    server: bool = False,
) -> None:
    """Download ``url`` (the service's, with ``server``) unless its file is there already;
    continue what an earlier -c run left."""
    try:
        target, named_by_url = _download_target(url, destination, args.resume)
    except _UsageError as exc:
        # The service's URL names no file: its fault, not a usage error.
        if server:
            raise _Refused(str(exc)) from None
        raise
    # KEY.csv, or in the summary (a signed URL's credentials are not in the file's name).
    if named_by_url and client.redact(url, signed_urls=False) != url:
        raise _Refused(f"the URL {url} holds a secret: no file is named after it; give DEST")
    resume = args.resume
    partial = None
    if target != "-":
        # Named as the download names it (beside the file a link names); None: it refuses the link.
        with contextlib.suppress(OSError):
            partial = _PartialFile(target)
        if _already_there(target, partial, sha256, named_by_url):
            # Partial files are never stranded by a download someone else finished.
            with contextlib.suppress(OSError):
                if partial is not None:
                    partial.remove()
            stderr.message(f"{target} already has the expected sha256: not downloaded again")
            return
        # What a -c run left is continued (the library says "resuming:"), then removed.
        if not resume:
            resolved = client.resolve(url)
            with contextlib.suppress(OSError):
                resume = partial is not None and partial.resumable(resolved)
    _cli_download(client, url, target, args, stderr, sha256=sha256, resume=resume, partial=partial)


def _download_target(url: str, destination: str | None, resume: bool) -> tuple[str, bool]:
    """Where a download goes (DEST, or in it when a directory, a file named after the URL, or -)
    and whether its name came from the URL."""
    if destination == "-":
        if resume:
            raise _UsageError("-c needs a file to continue: not - (stdout)")
        return "-", False
    if destination is not None and not os.path.isdir(destination):
        return destination, False
    # The path, not the query, which may hold a signature.
    path = urllib.parse.urlsplit(url).path
    name = urllib.parse.unquote(path.rsplit("/", 1)[-1])
    # "-" would be stdout.
    if name in ("", "-", ".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise _UsageError(f"cannot name a file after the URL path {path!r}: give DEST")
    odd = _odd_name(name)
    if odd:
        raise _UsageError(f"the file name {name!r} the URL gives {odd}: give DEST")
    return os.path.join(destination or "", name), True


def _odd_name(name: str) -> str | None:
    """Why a file name a URL gives is refused: hidden, read as an option (``-rf`` in ``rm *``),
    edged with white space, holding what a terminal acts on or hides; None: it is not."""
    if name.startswith((".", "-")):
        return f"starts with a {'dot' if name[0] == '.' else 'dash'}"
    if name != name.strip():
        return "starts or ends with white space"
    return "holds a control character or an invisible one" if _printable(name) != name else None


def _already_there(
    target: str, partial: _PartialFile | None, sha256: str | None, named_by_url: bool
) -> bool:
    """True when ``target`` (as ``partial`` names it) already has ``sha256``; a file named after
    the URL is never replaced (_Refused)."""
    if not os.path.lexists(target):
        return False
    if sha256 and partial is not None and partial.holds(sha256):
        return True
    if named_by_url:
        raise _Refused(
            f"{target} exists and was not replaced (its name came from the URL):"
            " give DEST to replace it"
        )
    return False


def _cli_download(
    client: DatasetClient,
    url: str,
    target: str,
    args: _Settings,
    stderr: _Stderr,
    *,
    sha256: str | None,
    resume: bool,
    partial: _PartialFile | None,
) -> None:
    """Download with a progress line on a terminal stderr; then a one-line summary."""
    to_stdout = target == "-"
    # No progress line over a file that is itself being written to the terminal.
    draw = stderr.is_terminal and not (to_stdout and sys.stdout.isatty())
    progress = _ProgressLine(stderr, draw=draw)
    stdout = None
    if to_stdout:
        sys.stdout.flush()
        stdout = _CountedStdout(sys.stdout.fileno(), "wb", closefd=False)
    options: dict[str, Any] = {"max_rate": args.limit_rate} if args.limit_rate else {}
    if args.speed_limit:
        options["min_rate"] = args.speed_limit
    try:
        client.download(
            url,
            target if stdout is None else stdout,
            progress=progress,
            sha256=sha256,
            resume=resume,
            connections=args.connections,
            verified=progress.verified.append,
            **options,
        )
    except BaseException as exc:
        # Said after the error or interruption (by main and _run_command).
        if stdout is not None and isinstance(exc, BrokenPipeError):
            total = f" of {_size(progress.total)}" if progress.total else ""
            went = f"stdout's reader went away after {_size(stdout.written)}{total} was written"
            raise _Refused(f"{went}: the file is incomplete") from None
        hint = _partial_file_hint(partial, client, url, resume, received=progress.done > 0)
        # As curl says it.
        if isinstance(exc, RequestTimeoutError) and exc.deadline is not None:
            ran = time.monotonic() - progress.created
            hint = f"; it ran {ran:.1f} s and received {progress.received()}{hint}"
        _noted(exc, target, hint)
        raise
    finally:
        progress.finish()
    stderr.message(_download_summary("stdout" if to_stdout else target, progress, sha256))


def _download_summary(where: str, progress: _ProgressLine, sha256: str | None) -> str:
    """``downloaded out.bin: 3.0 MiB (1.4 MiB already there), 2.0 s, 803.6 KiB/s, sha256
    verified``: this run's time and rate, and what the file was checked against."""
    elapsed = max(time.monotonic() - progress.created, 1e-6)
    already = progress.first or 0
    size = _size(progress.done) + (f" ({_size(already)} already there)" if already else "")
    rate = _size((progress.done - already) / elapsed)
    # download() adds it to each check when a redirect left https://.
    clear = " over plain HTTP"
    checks = progress.verified
    servers = [check.removesuffix(clear) for check in checks if not check.startswith("sha256")]
    checked = f", verified by the server's {servers[0]}" if servers else ""
    checked = ", sha256 verified" if sha256 else checked
    # A digest over plain HTTP proves less.
    if checked and any(check.endswith(clear) for check in checks):
        checked += " (the bytes came over plain HTTP: a redirect left https://)"
    return f"downloaded {where}: {size}, {elapsed:.1f} s, {rate}/s{checked}"


class _CountedStdout(io.FileIO):
    """stdout for a download's bytes, unbuffered, counting what reached it (``| head -c`` may
    take part of a chunk)."""

    written = 0

    def write(self, data: Any, /) -> int:
        count = super().write(data)
        # A non-blocking stdout that is full: said as a buffered stream says it.
        if count is None:
            raise BlockingIOError(11, "stdout is full and non-blocking")
        self.written += count
        return count


def _partial_file_hint(
    partial: _PartialFile | None, client: DatasetClient, url: str, resume: bool, *, received: bool
) -> str:
    """After an interruption: -c's partial file (the user's own, of url), or that -c keeps it."""
    if partial is None:
        return ""
    if not resume:
        kept = "; with -c, the partial file is kept and the same command continues it"
        return kept if received else ""
    with contextlib.suppress(OSError, ValueError):
        if partial.resumable(client.resolve(url)):
            return f"; the same command continues its partial file {partial.path}"
    return ""


# --- The terminal: stderr's lines, results, the pager, tables, progress, completion ---


# Made on first use: --help and --version need none of it.
@functools.cache
def _escapes() -> tuple[re.Pattern[str], dict[int, str], dict[int, str]]:
    """A pattern of _UNSEEN's characters; their escapes on a terminal (``\\x1b``, ``\\u202e``)
    and in JSON (``\\u``, a surrogate pair past U+FFFF; json.dumps itself escapes C0 alone)."""
    spans = re.findall(r"(.)(?:-(.))?", _UNSEEN, re.DOTALL)
    codes = [code for a, b in spans for code in range(ord(a), ord(b or a) + 1)]
    shapes = ((0xA0, "\\x{:02x}"), (0x10000, "\\u{:04x}"), (0x110000, "\\U{:08x}"))
    terminal = {c: next(shape for end, shape in shapes if c < end).format(c) for c in codes}
    escaped = {c: json.dumps(chr(c))[1:-1] if c > 0x7F else "\\u007f" for c in codes if c >= 0x7F}
    return re.compile(f"[{_UNSEEN}]"), terminal, escaped


def _printable(text: str) -> str:
    """``text`` with what a terminal would act on or hide escaped (the library's _UNSEEN)."""
    pattern, terminal, _ = _escapes()
    return text.translate(terminal) if pattern.search(text) else text


def _encodable(text: str) -> str:
    """``text`` but for lone surrogates (``\\ud800``), which no UTF-8 stream takes: for a file."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _json_text(value: Any, indent: int | None = None) -> str:
    """JSON whose text holds no control character (json escapes C0; DEL, C1 and the rest here)."""
    separators = None if indent else (", ", ": ")
    text = json.dumps(value, indent=indent, ensure_ascii=False, separators=separators)
    return text.translate(_escapes()[2])


def _terminal_size(stream: Any, name: str) -> int:
    """The ``columns`` or ``lines`` of the terminal ``stream`` writes to ($COLUMNS, $LINES first,
    as shutil reads them); 0 when it is none."""
    variable = os.environ.get(name.upper(), "")
    # Anything else is not a terminal's size.
    if variable.isascii() and variable.isdigit() and len(variable) <= 4:
        return int(variable)
    try:
        return getattr(os.get_terminal_size(stream.fileno()), name) if stream.isatty() else 0
    except (AttributeError, OSError, ValueError):
        return 0


class _Stderr(logging.Handler):
    """The command's stderr, and the library's log handler: one-line messages and, on a terminal,
    one status line under them (``line``: a download's progress; without -v, a retry under way),
    never left behind. Every text is escaped (much came from the network) and redacted."""

    def __init__(self, *, quiet: bool, verbose: bool) -> None:
        super().__init__()
        self.stream, self.quiet, self.verbose = sys.stderr, quiet, verbose
        try:
            self.is_terminal = self.stream.isatty()
        except (AttributeError, ValueError):
            self.is_terminal = False
        self.line: str | None = None
        # The client's redact once it is made: its key, in any form, and signed URLs' credentials.
        self.redact: Callable[[str], str] = lambda text: text
        # Held to write a line: a download's threads log too (logging's own lock is self.lock).
        self.writing = _thread.allocate_lock()

    def status(self, line: str | None) -> None:
        """Draw the status line in place of the last one (None: clear it)."""
        if self.is_terminal and not self.quiet:
            with self.writing:
                width = (_terminal_size(self.stream, "columns") or 80) - 1
                # Redacted before it is cut: a secret cut in two would not be found whole (_write).
                shown = line and _printable(self.redact(line))
                self.line = shown and _status_fitted(shown, width)
                self._write(f"\r{self.line or ''}\033[K")

    def message(self, text: str, *, error: bool = False, raw: bool = False) -> None:
        """A line (``raw``: text already made safe, such as JSON) above the status line."""
        if self.quiet and not error:
            return
        with self.writing:
            if error:
                # An error ends what the status line said.
                self.line = None
            clear = "\r\033[K" if self.is_terminal else ""
            self._write(clear + (text if raw else _printable(text)) + "\n" + (self.line or ""))

    def warning(self, text: str) -> None:
        self.message(f"dataset-client: warning: {text}")

    def error(self, text: str, status: int = _EXIT_SERVICE_ERROR) -> int:
        self.message(f"dataset-client: error: {' '.join(text.split())}", error=True)
        return status

    def log(self, record: Any) -> None:
        """A logging handler's emit: the library's request (DEBUG), resume (INFO), retry lines."""
        args = record.args or ()
        # A retry's cause: its sizes for people (the final error says it all in the CLI's words).
        shown = [
            a.worded(**_sizes_in_words(a)) if isinstance(a, DatasetClientError) else a for a in args
        ]
        text = "dataset-client: " + (record.msg % tuple(shown) if shown else record.getMessage())
        # A resume: one line, the URL left to -v.
        if not self.verbose and record.levelno == logging.INFO:
            text = f"dataset-client: {record.event}"
        lasting = getattr(record, "lasting", False)
        if record.levelno >= logging.WARNING and not self.verbose and not lasting:
            # A retry: said while it waits, gone once it is over.
            self.status(text)
        else:
            # Never cut: the cause of a retry is at its end.
            self.message(text)

    emit = log

    def close(self) -> None:
        if self.line:
            self.status(None)

    def _write(self, text: str) -> None:
        # A broken stderr must not hide the error.
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(self.redact(text))
            self.stream.flush()


def _print_result(result: Any, output: str) -> None:
    """Print a result as a table, csv, jsonl or json; a result that is not tabular, as json."""
    table = _tabular(result)
    if table is None or output == "json":
        sys.stdout.write(_json_text(result, 2) + "\n")
        return
    columns, rows = table
    if output == "jsonl":
        for row in rows:
            sys.stdout.write(_json_text(dict(zip(columns, row, strict=False))) + "\n")
    elif output == "csv":
        import csv

        # A terminal shows the cells escaped; a file or pipe gets them as they are.
        shown = _printable if sys.stdout.isatty() else _encodable
        writer = csv.writer(_LineFeedRows(), lineterminator="\r\n")
        writer.writerow([shown(name) for name in columns])
        writer.writerows([shown(_cell(value)) for value in row] for row in rows)
    else:
        lines = _table_lines(columns, rows, _terminal_size(sys.stdout, "columns"))
        sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


class _LineFeedRows:
    """csv.writer's stream: its rows, ended in CR LF (a cell holding a CR is then quoted on every
    Python: 3.11's quotes only what ends rows), end in LF on stdout, as psql --csv's do."""

    def write(self, row: str) -> int:
        return sys.stdout.write(row.removesuffix("\r\n") + "\n")


def _print_record(record: dict[str, Any], settings: _Settings) -> None:
    """One object (an export, a dataset) as --output says: a ``field | value`` block, JSON, one
    JSON line, or csv's header and one row."""
    export = settings.command == "export"
    shown = _export_fields(record) if export else record
    if settings.output == "table" and shown:
        # An export's id, sha256 and URL are copied: never cut, they may run past the edge.
        lines = _block_lines(shown, _terminal_size(sys.stdout, "columns"), spaceless=export)
        sys.stdout.write("".join(line + "\n" for line in lines))
    elif settings.output in ("table", "json"):
        sys.stdout.write(_json_text(record, 2) + "\n")
    else:
        table = {"columns": list(record), "rows": [list(record.values())]}
        _print_result(table, settings.output)
    sys.stdout.flush()


_EXPORT_FIELDS: tuple[str, ...] = ("id", "dataset", "symbols", "start_date", "end_date", "format")
_EXPORT_FIELDS += ("rows", "row_count", "size", "sha256", "download_url")


def _export_fields(export: dict[str, Any]) -> dict[str, Any]:
    """The fields of an export people check and act on (--output json has all), its size in KiB."""
    shown = {name: export[name] for name in _EXPORT_FIELDS if export.get(name) is not None}
    # A size no file has is shown as it is.
    if _is_number(shown.get("size")) and 0 <= shown["size"] <= 2**63 - 1:
        shown["size"] = _size(shown["size"])
    return shown


def _block_lines(fields: dict[str, Any], width: int, *, spaceless: bool = False) -> list[str]:
    """``field | value`` lines, as psql's ``\\d``: every value whole (nested ones as JSON), a long
    one wrapped at words to ``width`` columns (0: no limit); ``spaceless``: one with no space (a
    sha256, a URL) is not, and runs past the edge, where the terminal's wrap keeps it whole."""
    values = fields.values()
    texts = [_printable(_json_text(v) if isinstance(v, (dict, list)) else _cell(v)) for v in values]
    pairs = zip(values, texts, strict=True)
    whole = [_is_number(value) or (spaceless and " " not in text) for value, text in pairs]
    names = [_printable(name) for name in fields]
    # Without its -[ RECORD 1 ]- line.
    return _record_lines(names, [texts], whole, width or sys.maxsize)[1:]


class _TerminalCopy(io.StringIO):
    """What is printed for a terminal, kept to be paged: isatty() and fileno() as the terminal's."""

    def __init__(self, terminal: Any) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return int(self.terminal.fileno())


def _paged(print_it: Callable[[], None], *, allowed: bool, redact: Callable[..., Any]) -> bool:
    """Run ``print_it``; on a terminal, what it printed goes through the pager when it is taller
    than the screen, as psql and gh do: True when it did."""
    terminal = sys.stdout
    try:
        on_terminal = allowed and terminal.isatty()
    except (AttributeError, ValueError):
        on_terminal = False
    if not on_terminal:
        print_it()
        # What cannot be written (a closed stdout) is this command's error.
        sys.stdout.flush()
        return False
    copy = _TerminalCopy(terminal)
    with contextlib.redirect_stdout(copy):
        print_it()
    text = copy.getvalue()
    height = _terminal_size(terminal, "lines")
    command = _pager_command() if height and text.count("\n") >= height else None
    paged = command is not None and _run_pager(command, text, terminal, redact)
    if not paged:
        terminal.write(text)
        terminal.flush()
    return paged


def _pager_command() -> list[str] | None:
    """$DATASET_CLIENT_PAGER, else $PAGER (set but empty: no pager, as git and psql read them),
    else ``less -FRX`` when installed; None: no pager."""
    for name in ("DATASET_CLIENT_PAGER", "PAGER"):
        if name in os.environ:
            try:
                return shlex.split(os.environ[name]) or None
            except ValueError:
                # Unbalanced quotes: not a command that can run.
                return None
    less = shutil.which("less")
    return [less, "-FRX"] if less else None


def _run_pager(command: list[str], text: str, terminal: Any, redact: Callable[..., Any]) -> bool:
    """``text`` through the pager on ``terminal``, whose environment holds nothing ``redact``
    (the client's) hides; False when it cannot start. Quitting it early is fine: no error."""
    import subprocess

    # None of the key, a copy of it, a proxy's password.
    environment = {
        name: value
        for name, value in os.environ.items()
        if name != "DATASET_CLIENT_API_KEY" and redact(value, signed_urls=False) == value
    }
    terminal.flush()
    try:
        output = terminal.fileno()
        pager = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=output, env=environment)
    except OSError:
        return False
    assert pager.stdin is not None
    # The pager quit before reading all (BrokenPipeError), or Ctrl-C, which is the pager's to
    # handle (less stays on): the rest is not wanted, and the pager is waited for, as git does.
    try:
        encoding = getattr(terminal, "encoding", None) or "utf-8"
        with contextlib.suppress(OSError, KeyboardInterrupt):
            pager.stdin.write(text.encode(encoding, "replace"))
        with contextlib.suppress(OSError, KeyboardInterrupt):
            pager.stdin.close()
        for _ in range(1000):
            with contextlib.suppress(KeyboardInterrupt):
                pager.wait()
                break
    except BaseException:
        # SIGTERM, SIGHUP: the pager goes too, not left reading the terminal.
        pager.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            pager.wait(5)
        raise
    return True


def _tabular(result: Any) -> tuple[list[str], list[list[Any]]] | None:
    """Columns and rows of a ``{"columns": [...], "rows": [[...]]}`` result or a list of objects."""
    if isinstance(result, dict):
        names, rows = result.get("columns"), result.get("rows")
        if (
            isinstance(names, list)
            and isinstance(rows, list)
            and all(isinstance(r, list) for r in rows)
        ):
            size = len(names)
            return [str(name) for name in names], [(row + [None] * size)[:size] for row in rows]
    if isinstance(result, list) and all(isinstance(item, dict) for item in result):
        columns = list(dict.fromkeys(str(key) for item in result for key in item))
        return columns, [[item.get(column) for column in columns] for item in result]
    return None


def _cell(value: Any) -> str:
    """A value as a table or csv cell: text as is, anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Columns a text column keeps before the table turns into one block per record.
_NARROWEST_TEXT = 8


def _table_lines(columns: list[str], rows: list[list[Any]], width: int) -> list[str]:
    """Aligned columns, numbers on the right and never cut, no line wider than ``width`` (0: no
    limit): nested values narrow first, then text; when that is not enough, one block per record,
    as psql's expanded mode. Then ``(N rows)``. Linear in the size of the result."""
    names = [_printable(name) for name in columns]
    cells = [[_printable(_cell(value)) for value in row] for row in rows]
    right = [[_is_number(value) for value in row] for row in rows]
    numeric = [any(row[index] for row in right) for index in range(len(columns))]
    nested = [any(isinstance(row[i], (dict, list)) for row in rows) for i in range(len(columns))]
    count = f"({len(rows)} row{'' if len(rows) == 1 else 's'})"
    widths = _column_widths(names, cells, numeric, width, nested)
    # Records: nested values as JSON with spaces, to wrap at words too.
    if widths is None:
        cells = [_spaced(row, texts) for row, texts in zip(rows, cells, strict=True)]
        return [*_record_lines(names, cells, numeric, width), count]

    def line(texts: list[str], to_right: list[bool]) -> str:
        fitted = zip(texts, widths, to_right, strict=True)
        return "  ".join(_fit(text, size, on_right) for text, size, on_right in fitted).rstrip()

    rule = ["-" * size for size in widths]
    lines = [line(names, numeric), line(rule, numeric)] if columns else []
    lines += [line(row, aligned) for row, aligned in zip(cells, right, strict=True)]
    return [*lines, count]


def _spaced(row: list[Any], cells: list[str]) -> list[str]:
    """A record's cells, nested values as JSON with spaces (``["AAPL", "MSFT"]``): words to wrap."""
    pairs = zip(row, cells, strict=True)
    return [_printable(_json_text(v)) if isinstance(v, (dict, list)) else c for v, c in pairs]


def _column_widths(
    names: list[str], cells: list[list[str]], numeric: list[bool], width: int, nested: list[bool]
) -> list[int] | None:
    """Each column's width: the widest columns of nested values give way first, then the widest
    text columns, each down to _NARROWEST_TEXT; a column of numbers never does. None when the
    columns cannot fit ``width`` so."""
    # A cell is measured no further than the terminal's width: wider, it is cut anyway.
    limit = width or sys.maxsize
    columns = [[name] + [row[index] for row in cells] for index, name in enumerate(names)]
    widths = [max(_width_up_to(text, limit) for text in column) for column in columns]
    if not width:
        return widths
    room = width - 2 * (len(names) - 1)
    floors = [
        size if number else min(size, _NARROWEST_TEXT)
        for size, number in zip(widths, numeric, strict=True)
    ]
    if sum(floors) > room:
        return None
    # Nested values first: text says more in the same room.
    for giving_way in (True, False):
        chosen = [i for i, number in enumerate(numeric) if not number and nested[i] is giving_way]
        _narrow(widths, floors, chosen, sum(widths) - room)
    return widths


def _narrow(widths: list[int], floors: list[int], chosen: list[int], excess: int) -> None:
    """Take ``excess`` columns (as many as the floors allow) off the widest ``chosen`` ones, level
    as cutting the widest one at a time would; found by bisection, whatever the cells' length."""
    if excess <= 0 or not chosen:
        return

    def cut_at(level: int) -> int:
        return sum(max(0, widths[index] - max(level, floors[index])) for index in chosen)

    # cut_at(high) is 0: not enough.
    low, high = 0, max(widths[index] for index in chosen)
    # The highest level that cuts enough (low: 0 when even floors do not).
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if cut_at(middle) >= excess else (low, middle)
    # Cut more than needed: one column back for each.
    spare = max(0, cut_at(low) - excess)
    for index in chosen:
        narrowed = min(widths[index], max(low, floors[index]))
        if spare and narrowed == low < widths[index]:
            narrowed, spare = narrowed + 1, spare - 1
        widths[index] = narrowed


def _record_lines(
    names: list[str], cells: list[list[str]], numeric: list[bool], width: int
) -> list[str]:
    """One block per record, ``-[ RECORD 1 ]-`` then ``column | value``, as psql's expanded wrapped
    format: names up to half of ``width``; longer text wraps, indented; numbers are never cut."""
    name_width = min(max(map(_text_width, names), default=0), max(width // 2, 1))
    room = max(width - name_width - 3, 1)
    indent = " " * name_width + " | "
    lines = []
    for number, row in enumerate(cells, 1):
        lines.append(f"-[ RECORD {number} ]-")
        for name, value, whole in zip(names, row, numeric, strict=True):
            pieces = [value] if whole else _wrapped(value, room)
            head = _fit(name, name_width, False)
            lines.append(f"{head} | {pieces[0]}" if value else f"{head} |")
            lines += [indent + piece for piece in pieces[1:]]
    return lines


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in pieces of at most ``width`` columns (a wide character alone may take two): a
    piece ends at a space (which goes) when the next word fits a line; a longer word is cut."""
    import bisect
    import itertools

    # A column each character (see _text_width).
    narrow = text.isascii() or max(text) < "\u0300"
    ends = [] if narrow else list(itertools.accumulate(map(_character_width, text)))
    pieces, start = [], 0
    while start < len(text):
        stop = start + width
        if ends:
            taken = ends[start - 1] if start else 0
            stop = max(bisect.bisect_right(ends, taken + width, lo=start), start + 1)
        stop = min(stop, len(text))
        space = text.rfind(" ", start + 1, stop + 1) if stop < len(text) else -1
        # A space at stop is a word's end.
        if space > 0 and (space == stop or _fits(text, space + 1, width)):
            pieces.append(text[start:space])
            start = space + 1
        else:
            pieces.append(text[start:stop])
            start = stop
    return pieces or [""]


def _fits(text: str, at: int, width: int) -> bool:
    """Whether the word at ``at`` in ``text`` fits ``width`` columns (read no further)."""
    end = text.find(" ", at, at + width + 1)
    return _width_up_to(text[at : end if end >= 0 else at + width + 1], width) <= width


def _text_width(text: str) -> int:
    """Columns ``text`` takes on a terminal: East Asian wide characters 2, combining marks none."""
    # None of them comes before U+0300.
    if text.isascii() or max(text) < "\u0300":
        return len(text)
    return sum(map(_character_width, text))


# Bounded: a server may send every character there is.
@functools.lru_cache(maxsize=4096)
def _character_width(character: str) -> int:
    import unicodedata

    if unicodedata.combining(character):
        return 0
    return 2 if unicodedata.east_asian_width(character) in "WF" else 1


def _width_up_to(text: str, limit: int) -> int:
    """``_text_width(text)``, or when above ``limit`` perhaps less (still above it): a long text's
    first ``limit + 1`` characters tell, unless combining marks make them narrower."""
    if len(text) > limit + 1:
        first = _text_width(text[: limit + 1])
        if first > limit:
            return first
    return _text_width(text)


def _fit(text: str, width: int, right: bool) -> str:
    """``text`` padded to ``width`` columns, or cut to it with an ellipsis."""
    if _width_up_to(text, width) > width:
        # One pass: the characters that fit in front of the ellipsis.
        kept, room = 0, width - 1
        for character in text:
            room -= _text_width(character)
            if room < 0:
                break
            kept += 1
        text = text[:kept] + ("…" if width else "")
    padding = " " * (width - _text_width(text))
    return padding + text if right else text + padding


def _duration(seconds: float) -> str:
    """m:ss, or h:mm:ss past an hour."""
    minutes, second = divmod(int(seconds + 0.5), 60)
    if minutes < 60:
        return f"{minutes}:{second:02d}"
    return f"{minutes // 60}:{minutes % 60:02d}:{second:02d}"


# The widest each part of the progress line gets: "100%", the bytes (as wide as
# "<total>/<total>"), "1023.9 MiB/s", "99:59:59 left".
_PROGRESS_PARTS = (4, 0, len("1023.9 MiB/s"), len("99:59:59 left"))


def _size_of(done: int, total: int) -> str:
    """``1.5/8.0 MiB``: ``done`` in the unit of ``total``: never wider than at the end."""
    text = _size(total)
    unit = text.split(" ")[1]
    if unit == "B":
        return f"{done}/{text}"
    return f"{done / 1024 ** ('B', 'KiB', 'MiB', 'GiB', 'TiB').index(unit):.1f}/{text}"


class _ProgressLine:
    """A download's ``progress`` callback: counts, and redraws the status line when its percent
    changes, each part in room for its widest value from the first frame on (the bar never jumps).
    ``created``, ``started``: the start, the first bytes'; ``first``: the bytes a resumed file had;
    ``percent`` on the screen; ``layout``: width, the bar's, each part's; ``verified``: checks."""

    def __init__(self, stderr: _Stderr, *, draw: bool) -> None:
        self.stderr, self.draw = stderr, draw
        self.created = self.started = time.monotonic()
        self.drawn_at = 0.0
        self.first: int | None = None
        self.done = 0
        self.total: int | None = None
        self.percent = -1
        self.layout: tuple[int, int, list[int]] | None = None
        self.verified: list[str] = []

    def __call__(self, done: int, total: int | None) -> None:
        if self.first is None or done < self.first:
            self.first, self.started = done, time.monotonic()
        self.done, self.total = done, total
        now = time.monotonic()
        percent = done * 100 // total if total else -1
        if self.draw and (now - self.drawn_at >= 0.1 or percent != self.percent):
            self.drawn_at, self.percent = now, percent
            width = _terminal_size(self.stderr.stream, "columns") or 80
            self.stderr.status(self.text(now - self.started, width))

    def received(self) -> str:
        """``1.0 MiB of 3.0 MiB``: how much of the file is in."""
        return f"{_size(self.done)} of {_size(self.total)}" if self.total else _size(self.done)

    def text(self, elapsed: float, width: int) -> str:
        """Bar, percent, bytes, rate and time left, in ``width - 1`` columns."""
        rate = (self.done - (self.first or 0)) / elapsed if elapsed >= 0.5 else 0.0
        if not self.total:
            shown = f"{_size(self.done)}  {_size(rate)}/s" if rate else _size(self.done)
            return _fit(shown, width - 1, False).rstrip()
        bar, rooms = self._layout(width, self.total)
        parts = [f"{self.done * 100 // self.total:3d}%", _size_of(self.done, self.total), "", ""]
        if rate:
            parts[2:] = [f"{_size(rate)}/s", f"{_duration((self.total - self.done) / rate)} left"]
        text = "  ".join(_fit(part, room, False) for part, room in zip(parts, rooms, strict=False))
        if bar:
            filled = bar * self.done // self.total
            text = f"[{'#' * filled}{'-' * (bar - filled)}]  {text}"
        return text.rstrip()

    def _layout(self, width: int, total: int) -> tuple[int, list[int]]:
        """The bar's width (0: none) and the room of each part that fits this terminal and total."""
        if self.layout is None or self.layout[0] != width:
            rooms = list(_PROGRESS_PARTS)
            rooms[1] = len(_size_of(total, total))
            while len(rooms) > 1 and sum(rooms) + 2 * (len(rooms) - 1) > width - 1:
                rooms.pop()
            # "[", "]" and two spaces.
            bar = width - 1 - (sum(rooms) + 2 * (len(rooms) - 1)) - 4
            self.layout = (width, bar if bar >= 10 else 0, rooms)
        return self.layout[1], self.layout[2]

    def finish(self) -> None:
        if self.draw:
            self.stderr.status(None)


# A URL as a line shows it: a scheme that starts a word (never tried again from inside one: the
# pattern stays linear in a reason phrase of megabytes), "://", up to white space but for the
# punctuation after it; and a request that names one (``: GET URL``, through a proxy: its part).
_URL_IN_TEXT = r"(?<![\w+.-])[a-z][a-z0-9+.-]*://\S*[^\s:;,.)]"
_REQUEST_IN_TEXT = rf"(?:: )?\b[A-Z]+ {_URL_IN_TEXT}(?: via proxy \S+ \(NO_PROXY bypasses it\))?"


def _status_fitted(text: str, width: int) -> str:
    """A status line in ``width`` columns, cut where it says least (a retry keeps its reason):
    each URL from its end (to its origin), then the request (the error and -v say it whole),
    then the program's name; then (or at once, in a line without a URL) its end; linear."""
    excess = _text_width(text) - width
    urls: dict[str, int] = {}
    for url in re.findall(_URL_IN_TEXT, text):
        urls[url] = urls.get(url, 0) + 1
    # The longest first, each (as often as it is met) cut until the line fits.
    cut: dict[str, str] = {}
    for url, count in sorted(urls.items(), key=lambda item: len(item[0]), reverse=True):
        path_start = url.find("/", url.find("//") + 2) % (len(url) + 1)
        keep = max(len(url) - excess - 1, path_start + 1)
        if excess >= 0 and keep < len(url):
            cut[url] = url[:keep] + "\u2026"
            excess -= count * (_text_width(url) - _text_width(cut[url]))
    if cut:
        text = re.sub(_URL_IN_TEXT, lambda found: cut.get(found[0], found[0]), text)
    if urls and excess > 0:
        text = re.sub(" {2,}", " ", re.sub(_REQUEST_IN_TEXT, "", text))
        if _text_width(text) > width:
            text = text.removeprefix("dataset-client: ")
    return _fit(text, width, False).rstrip()


# The profiles of the config file (the library's _config_path): its [NAME] lines; a regular file
# only, as the library reads: a FIFO there would hold the shell waiting for a writer at each Tab.
_PROFILES_FUNCTION = r"""_dataset_client_profiles() {
    local config="${DATASET_CLIENT_CONFIG:-}"
    if [[ -z "$config" ]]; then
        case "${XDG_CONFIG_HOME:-}" in
            /*) config="$XDG_CONFIG_HOME" ;;
            *) config="$HOME/.config" ;;
        esac
        config="$config/dataset-client/config.toml"
    fi
    [[ -f "$config" && -r "$config" ]] &&
        sed -n 's/^[[:space:]]*\[\([A-Za-z0-9_-]*\)\].*/\1/p' "$config"
}
"""
_BASH_COMPLETION = """\
# dataset-client completion for bash: eval "$(dataset-client completion bash)"
PROFILES_FUNCTION
# File names, each one word (spaces, glob characters), not the files a download makes beside DEST.
_dataset_client_files() {
    local name
    compopt +o bashdefault 2>/dev/null  # its fallback would offer what is left out here
    COMPREPLY=()
    while IFS= read -r name; do
        case "${name##*/}" in
            HIDDEN) ;;
            *) COMPREPLY+=("$name") ;;
        esac
    done < <(compgen -f -- "$cur")
}
_dataset_client() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" command="" word i
    case "$prev" in
        --output) COMPREPLY=($(compgen -W "OUTPUTS" -- "$cur")); return ;;
        --format) COMPREPLY=($(compgen -W "FORMATS" -- "$cur")); return ;;
        --profile) COMPREPLY=($(compgen -W "$(_dataset_client_profiles)" -- "$cur")); return ;;
        --ca-bundle|--download) _dataset_client_files; return ;;
        VALUED) COMPREPLY=(); return ;;
    esac
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${COMP_WORDS[i]}"
        case "$word" in COMMANDS_CASE) command="$word"; break ;; esac
    done
    case "$command" in
CASES    esac
}
complete -o filenames -o bashdefault -F _dataset_client dataset-client
"""
_ZSH_COMPLETION = """\
#compdef dataset-client
# dataset-client completion for zsh: eval "$(dataset-client completion zsh)" (after compinit)
PROFILES_FUNCTION
# File names, quoted by _files, but not the hidden files a download makes beside its destination.
_dataset_client_files() { _files -F "(HIDDEN_LIST)" }
_dataset_client() {
    local command="" word
    case "${words[CURRENT-1]}" in
        --output) compadd -- OUTPUTS; return ;;
        --format) compadd -- FORMATS; return ;;
        --profile) compadd -- $(_dataset_client_profiles); return ;;
        --ca-bundle|--download) _dataset_client_files; return ;;
        VALUED) return ;;
    esac
    for word in "${(@)words[2,CURRENT-1]}"; do
        case "$word" in COMMANDS_CASE) command="$word"; break ;; esac
    done
    case "$command" in
CASES    esac
}
compdef _dataset_client dataset-client
# Under an alias (alias dataset-client='python3 -m dataset_client', as the README shows), zsh
# completes the words the alias stands for, as a python3 command, unless complete_aliases is set:
# those words, then, are completed here, and any other python3 command as before.
if (( ${+aliases[dataset-client]} )) && [[ ! -o complete_aliases ]]; then
    _dataset_client_alias=(${(z)aliases[dataset-client]})
    _dataset_client_before=${_comps[${_dataset_client_alias[1]}]:-_default}
    _dataset_client_aliased() {
        local count=${#_dataset_client_alias}
        if (( CURRENT > count )) &&
            [[ "${(j: :)${(@)words[1,count]}}" == "${(j: :)_dataset_client_alias}" ]]; then
            words=(dataset-client "${(@)words[count+1,-1]}")
            (( CURRENT -= count - 1 ))
            _dataset_client
        else
            "$_dataset_client_before" "$@"
        fi
    }
    compdef _dataset_client_aliased "${_dataset_client_alias[1]}"
fi
"""


# Exactly the files a download makes beside DEST (the library's _FileTarget, _StateFile and lock):
# never offered; anything else is (a user's .x.part.a). _HEX: one hex digit.
_HEX = "[0-9a-f]"
_HIDDEN_FILES: tuple[str, ...] = (".*.part", ".*.part.json", ".*.part.lock", ".*.part.json.tmp")
_HIDDEN_FILES += (".*.part.[1-3]", f".*.part.{_HEX * 12}", f".*.part.json.{_HEX * 8}.tmp")
_HIDDEN_FILES += (f".*.part.lock.{_HEX * 8}.new", f".*.part.lock.{_HEX * 7}.claim")


def _completion_script(shell: str, parser: argparse.ArgumentParser) -> str:
    """A completion script for ``shell``: commands, options, their values, file names for DEST."""
    known = _options_of(parser)
    tables = {name: _options_of(command) for name, command in _command_parsers(parser).items()}
    own = {
        name: [option for option in table if option not in known] for name, table in tables.items()
    }
    # Their values are completed.
    offered = ("--output", "--format", "--ca-bundle", "--profile")
    valued = {
        option: 1
        for table in (known, *tables.values())
        for option, values in table.items()
        if values == 1 and option not in offered
    }
    if shell == "bash":
        offer, test = 'COMPREPLY=($(compgen -W "{}" -- "$cur"))', "$cur"
    else:
        offer, test = "compadd -- {}", "$PREFIX"
    # After each command: its operands.
    otherwise = {"": offer.format(" ".join(_COMMANDS))}
    for name, command in _COMMANDS.items():
        if command.operands:
            otherwise[name] = offer.format(" ".join(command.operands))
        elif command.files:
            otherwise[name] = "_dataset_client_files"
    cases = ""
    # No command yet, then each: its options, else its operands.
    for name in ("", *own):
        words = sorted({*known, *own[name]} - {"--version"} if name else known)
        then = f"{offer.format(' '.join(words))}; else {otherwise.get(name, ':')}"
        cases += f'        "{name}") if [[ {test} == -* ]]; then {then}; fi ;;\n'
    replacements = {
        "PROFILES_FUNCTION": _PROFILES_FUNCTION,
        "HIDDEN_LIST": " ".join(_HIDDEN_FILES),
        "HIDDEN": "|".join(_HIDDEN_FILES),
        "OUTPUTS": " ".join(_OUTPUTS),
        "FORMATS": " ".join(_FORMATS),
        "VALUED": "|".join(valued),
        "COMMANDS_CASE": "|".join(_COMMANDS),
        "CASES": cases,
    }
    script = _BASH_COMPLETION if shell == "bash" else _ZSH_COMPLETION
    return re.sub("|".join(replacements), lambda found: replacements[found[0]], script)


if __name__ == "__main__":
    sys.exit(main())
