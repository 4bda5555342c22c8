"""Connections: kept alive and shared by threads, replaced when the server closed them, each
request as urllib shows it to audit hooks.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading

from tests.support import ROOT, Handler, ServerTestCase, reply, wait_for

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class ConnectionTests(ServerTestCase):
    def test_audit_hooks_see_each_request_as_urllib_shows_it(self) -> None:
        # Without a proxy the client hands requests to its pool itself: the opener's event stays.
        self.server.default = reply(body=[])
        program = (
            "import sys, dataset_client as dc\n"
            "sys.addaudithook(lambda event, args: event == 'urllib.Request' and print(args[::3]))\n"
            f"dc.DatasetClient({self.server.url + '/api'!r}).query('SELECT 1')\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        self.assertEqual(done.stdout, f"('{self.server.url}/api/query', 'POST')\n")
        self.assertEqual(self.requests[-1].method, "POST")

    def test_many_calls_one_connection(self) -> None:
        self.server.default = reply(body=[1])
        client = self.client()
        for _ in range(20):
            client.list_datasets()
            client.query("SELECT 1")
        client.download("files/x", io.BytesIO())
        self.assertEqual(len(self.requests), 41)
        self.assertEqual(self.server.connections, 1)

    def test_connection_closed_by_the_server_while_idle_is_replaced(self) -> None:
        def reply_then_close(handler: Handler) -> None:
            reply(body=[1])(handler)
            handler.close_connection = True  # closes without saying so

        self.script(reply_then_close, reply(body=[2]), reply(body=[3]))
        client = self.client(max_retries=0)
        self.assertEqual(client.list_datasets(), [1])
        wait_for(lambda: self.server.closed_connections == 1)
        self.assertEqual(
            client.query("SELECT 1"), [2]
        )  # a POST: it must not be sent on the dead one
        self.assertEqual(client.list_datasets(), [3])
        self.assertEqual(self.server.connections, 2)
        self.assertEqual(len(self.requests), 3)

    def test_connection_close_is_honoured(self) -> None:
        self.server.default = reply(body=[], headers={"Connection": "close"})
        client = self.client()
        client.list_datasets()
        client.list_datasets()
        self.assertEqual(self.server.connections, 2)

    def test_informational_responses_are_skipped(self) -> None:
        def early_hints(handler: Handler) -> None:
            handler.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n")
            reply(body={"ok": 1})(handler)

        self.script(early_hints, reply(body={"ok": 2}))
        client = self.client()
        self.assertEqual(client.list_datasets(), {"ok": 1})
        self.assertEqual(client.list_datasets(), {"ok": 2})
        self.assertEqual(self.server.connections, 1, "a 1xx leaves the connection reusable")

    def test_threads_share_one_client(self) -> None:
        def echo(handler: Handler) -> None:
            reply(body={"path": handler.path})(handler)

        self.server.default = echo
        client = self.client()
        results: list[bool] = []

        def work(n: int) -> None:
            for _ in range(15):
                results.append(client.query(f"SELECT {n}") == {"path": "/api/v1/query"})

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        self.assertEqual(results, [True] * 90)
        self.assertEqual(
            sorted(r.json()["sql"] for r in self.requests),
            sorted(f"SELECT {n}" for n in range(6) for _ in range(15)),
        )
        self.assertLessEqual(self.server.connections, 6)
