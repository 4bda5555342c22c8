"""Beyond one process: fork, pickling and copying a client, process pools."""

from __future__ import annotations

import concurrent.futures
import copy
import io
import json
import multiprocessing
import os
import pickle
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import warnings

import dataset_client as dc
from dataset_client import DatasetClient
from tests.support import (
    CA_FILE,
    KEY,
    ROOT,
    Handler,
    ServerTestCase,
    blocked_in_a_socket_read,
    reply,
    serve_file,
    wait_for,
)

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


def _fork_quietly() -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads running
        return os.fork()


def _wait_for_child(pid: int, seconds: float) -> int | None:
    """The child's exit status, or None (and the child killed) when it has not ended in ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


class ForkTests(ServerTestCase):
    """A forked child: never stuck on a lock, never on its parent's connections."""

    def test_fork_while_another_thread_reads_a_response_returns_at_once_in_the_child(self) -> None:
        body, go_on = b"x" * 1000, threading.Event()

        def trickle(handler: Handler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body[:10])
            handler.wfile.flush()
            go_on.wait(10)
            handler.wfile.write(body[10:])

        self.script(trickle, reply(body=["after"]))
        client, sink = self.client(), io.BytesIO()
        reading = threading.Thread(target=client.download, args=("files/x", sink))
        reading.start()
        self.addCleanup(reading.join, 10)
        self.addCleanup(go_on.set)
        wait_for(
            lambda: blocked_in_a_socket_read(reading)
        )  # its buffered reader's lock is held now
        pid = _fork_quietly()
        if pid == 0:  # the child: leave at once, never returning into the test runner
            os._exit(0)
        self.assertEqual(
            _wait_for_child(pid, 5), 0, "the child hung in fork() on the reading thread's lock"
        )
        go_on.set()
        reading.join(10)
        self.assertEqual(sink.getvalue(), body, "the parent's read went on, its socket left open")
        self.assertEqual(client.list_datasets(), ["after"])
        self.assertEqual([r.connection for r in self.requests], [1, 1])

    def test_a_forked_child_never_uses_its_parents_connections(self) -> None:
        def echo(handler: Handler) -> None:
            reply(
                body={
                    "sql": json.loads(handler.body)["sql"],
                    "connection": handler.connection_number,
                }
            )(handler)

        self.server.default = echo
        client = self.client()
        self.assertEqual(
            client.query("SELECT 'parent'"), {"sql": "SELECT 'parent'", "connection": 1}
        )
        reader, writer = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", DeprecationWarning
            )  # 3.12+: fork() with threads running
            pid = os.fork()
        if (
            pid == 0
        ):  # the child: report what it got and leave, never returning into the test runner
            status = 1
            try:
                os.write(writer, json.dumps(client.query("SELECT 'child'")).encode())
                client.close()
                status = 0
            finally:
                os._exit(status)
        os.close(writer)
        with os.fdopen(reader, "rb") as pipe:
            child = json.loads(pipe.read() or b"null")
        self.assertEqual(os.waitpid(pid, 0)[1], 0)
        self.assertEqual(
            child,
            {"sql": "SELECT 'child'", "connection": 2},
            "the child opened a connection of its own",
        )
        again = client.query("SELECT 'parent again'")
        self.assertEqual(
            again,
            {"sql": "SELECT 'parent again'", "connection": 1},
            "the child's close() left it alone",
        )
        self.assertEqual(self.server.connections, 2)


class PickleTests(ServerTestCase):
    """A client pickled or copied: its settings, connections of its own, no key in vars()."""

    def test_a_pickled_or_copied_client_has_the_same_settings_and_connections_of_its_own(
        self,
    ) -> None:
        def echo(handler: Handler) -> None:
            reply(body={"connection": handler.connection_number})(handler)

        self.server.default = echo
        client = self.client(
            timeout=7, max_retries=3, headers={"X-Team": "blue"}, user_agent="fan/1", deadline=60
        )
        self.assertEqual(client.list_datasets(), {"connection": 1})
        ways = {
            "pickle": lambda c: pickle.loads(pickle.dumps(c)),
            "copy": copy.copy,
            "deepcopy": copy.deepcopy,
        }
        for number, (way, make) in enumerate(ways.items(), start=2):
            with self.subTest(way=way):
                other = make(client)
                self.addCleanup(other.close)
                self.assertIsInstance(other, DatasetClient)
                self.assertIsNot(other._pool, client._pool)
                self.assertEqual(
                    other.list_datasets(), {"connection": number}, "a connection of its own"
                )
                sent = self.requests[-1].headers
                self.assertEqual(
                    (
                        sent["Authorization"],
                        sent["X-Team"],
                        sent["User-Agent"],
                        self.requests[-1].path,
                    ),
                    (f"Bearer {KEY}", "blue", "fan/1", "/api/v1/datasets"),
                )
                settings = (
                    other.base_url,
                    other._timeout,
                    other._max_retries,
                    other._backoff_factor,
                    other._deadline,
                )
                self.assertEqual(settings, (self.server.url + "/api/v1", 7.0, 3, 0.001, 60.0))
                self.assertNotIn(KEY, repr(vars(other)))
        self.assertEqual(client.list_datasets(), {"connection": 1}, "the original kept its own")
        self.assertEqual(self.server.connections, 4)

    def test_a_closed_client_pickles_and_copies_closed(self) -> None:
        client = self.client()
        client.close()
        for other in (pickle.loads(pickle.dumps(client)), copy.copy(client), copy.deepcopy(client)):
            with self.assertRaises(dc.ClientClosedError):
                other.list_datasets()
            self.assertEqual(
                repr(other), f"<DatasetClient {self.server.url + '/api/v1'!r} (closed)>"
            )
        self.assertEqual((self.requests, self.server.connections), ([], 0))

    def test_a_caller_s_ssl_context_cannot_be_pickled_but_is_shared_by_copies(self) -> None:
        context = ssl.create_default_context(cafile=CA_FILE)
        client = self.client(ssl_context=context)
        message = (
            "a DatasetClient given an ssl_context cannot be pickled (an SSLContext cannot): pass"
            " ca_bundle=FILE instead of the context, or build the client in the worker"
        )
        with self.assertRaisesRegex(TypeError, f"^{re.escape(message)}$"):
            pickle.dumps(client)
        for other in (copy.copy(client), copy.deepcopy(client)):
            self.addCleanup(other.close)
            self.assertIs(other._pool._ssl_context, context)

    def test_no_form_of_the_key_shows_in_vars_of_a_client_made_or_unpickled(self) -> None:
        key = (
            "sk/test+0123456789"  # percent-encoded and JSON-escaped ("\\/") forms are redacted too
        )
        self.script(reply(400, {"message": f"bad key {key} sk%2Ftest%2B0123456789"}))
        client = self.client(api_key=key, headers={"X-Token": "header-secret"})
        for made in (client, pickle.loads(pickle.dumps(client))):
            self.addCleanup(made.close)
            shown = repr(vars(made))
            for form in (key, "sk%2Ftest%2B0123456789", "sk\\/test+0123456789", "header-secret"):
                self.assertNotIn(form, shown)
        with self.assertRaises(dc.ServiceError) as caught:
            client.list_datasets()
        self.assertIn(
            ": bad key <redacted> <redacted>",
            str(caught.exception),
            "still redacted where it is echoed",
        )
        self.assertEqual(self.requests[0].headers["Authorization"], f"Bearer {key}")

    def test_a_process_pool_s_workers_use_the_client_on_connections_of_their_own(self) -> None:
        # fork here (fast); .ci/process_checks.py runs spawn and forkserver too.
        def echo(handler: Handler) -> None:
            answer = {
                "sql": json.loads(handler.body)["sql"],
                "connection": handler.connection_number,
            }
            reply(body=answer)(handler)

        self.server.default = echo
        client = self.client()
        self.assertEqual(
            client.query("SELECT 'parent'"), {"sql": "SELECT 'parent'", "connection": 1}
        )
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", DeprecationWarning
            )  # 3.12+: fork() with threads running
            context = multiprocessing.get_context("fork")
            with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
                answers = list(
                    pool.map(client.query, [f"SELECT {n}" for n in range(4)], timeout=30)
                )
        self.assertEqual([answer["sql"] for answer in answers], [f"SELECT {n}" for n in range(4)])
        self.assertEqual(
            sorted(answer["connection"] for answer in answers), [2, 3, 4, 5], "a connection each"
        )
        self.assertEqual(client.query("SELECT 'parent again'")["connection"], 1)
        self.assertEqual({r.headers["Authorization"] for r in self.requests}, {f"Bearer {KEY}"})


class RacingDownloadsTests(ServerTestCase):
    """Issue 35: downloads racing to one destination each complete; the last to commit wins."""

    ROUNDS = int(os.environ.get("DATASET_CLIENT_RACING_ROUNDS", "8"))

    def serve_numbered(self) -> None:
        """Each request its own file: 64 KiB of its number, its ETag the number."""
        served = [0]
        lock = threading.Lock()

        def respond(handler: Handler) -> None:
            with lock:
                served[0] += 1
                number = served[0]
            serve_file(b"%08d" % number * 8192, etag=f'"{number}"')(handler)

        self.server.default = respond

    def race(self, resume: bool) -> None:
        directory = self.tmp()
        destination = directory / "out.bin"
        self.serve_numbered()
        code = (
            "import sys, dataset_client as dc\n"
            "with dc.DatasetClient(sys.argv[1], timeout=30, max_retries=0) as client:\n"
            "    for _ in range(int(sys.argv[3])):\n"
            "        client.download('files/x', sys.argv[2], resume=sys.argv[4] == 'True')\n"
        )
        arguments = [self.server.url + "/api/v1", str(destination), str(self.ROUNDS), str(resume)]
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", code, *arguments], cwd=ROOT, stderr=subprocess.PIPE
            )
            for _ in range(2)
        ]
        for process in processes:
            self.addCleanup(process.kill)
            self.addCleanup(process.stderr.close)  # type: ignore[union-attr]
        client = self.client(timeout=30, max_retries=0)
        failures: list[BaseException] = []

        def rounds() -> None:
            for _ in range(self.ROUNDS):
                try:
                    client.download("files/x", destination, resume=resume)
                except BaseException as exc:  # the test looks at it
                    failures.append(exc)

        threads = [threading.Thread(target=rounds) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        for process in processes:
            stderr = process.stderr.read()  # type: ignore[union-attr]
            self.assertEqual(process.wait(120), 0, stderr.decode(errors="replace")[-2000:])
        self.assertEqual(failures, [])
        data = destination.read_bytes()
        self.assertEqual(len(data), 65536)
        self.assertEqual(data, data[:8] * 8192, "one download's whole file")
        self.assertEqual([path.name for path in directory.iterdir()], ["out.bin"])

    def test_eight_threads_and_two_processes_each_complete(self) -> None:
        # Issue 35: "another file was put in place of the temporary file and moved into place"
        # for a download another one had committed over (3 runs in 4 with eight threads).
        self.race(resume=False)

    def test_eight_threads_and_two_processes_each_complete_resumable(self) -> None:
        self.race(resume=True)
