"""Redirects: the method on each status, credentials only to the same origin, no other scheme,
loops and malformed locations.
"""

from __future__ import annotations

import dataset_client as dc
from dataset_client import ServiceError
from tests.support import KEY, ServerTestCase, free_port, recorded_sleeps, reply

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class RedirectTests(ServerTestCase):
    def test_same_origin_redirect_keeps_credentials(self) -> None:
        self.script(reply(302, b"", {"Location": "/api/v2/datasets"}), reply(body=["d"]))
        self.assertEqual(self.client(headers={"X-Tenant": "t1"}).list_datasets(), ["d"])
        second = self.requests[1]
        self.assertEqual(second.path, "/api/v2/datasets")
        self.assertEqual(second.headers["Authorization"], f"Bearer {KEY}")
        self.assertEqual(second.headers["X-Tenant"], "t1")
        self.assertEqual(self.server.connections, 1, "the redirect's connection was reused")

    def test_credentials_never_follow_a_redirect_to_another_origin(self) -> None:
        other = self.start_server()
        other.script.append(reply(302, b"", {"Location": self.server.url + "/api/v1/back"}))
        self.script(
            reply(307, b"", {"Location": other.url + "/elsewhere"}), reply(body={"ok": True})
        )
        client = self.client(headers={"X-Tenant": "t1"})
        self.assertEqual(client.query("SELECT 1"), {"ok": True})
        (elsewhere,) = other.requests
        self.assertEqual((elsewhere.method, elsewhere.path), ("POST", "/elsewhere"))
        self.assertEqual(elsewhere.json(), {"sql": "SELECT 1"})
        self.assertNotIn("Authorization", elsewhere.headers)
        self.assertNotIn("X-Tenant", elsewhere.headers)
        self.assertEqual(elsewhere.headers["Accept"], "application/json")
        back = self.requests[1]
        self.assertEqual(back.path, "/api/v1/back")
        self.assertNotIn(
            "Authorization", back.headers, "once it left the origin, the key stays off"
        )

    def test_method_on_each_redirect_status(self) -> None:
        for status, method, has_body in (
            (301, "GET", False),
            (302, "GET", False),
            (303, "GET", False),
            (307, "POST", True),
            (308, "POST", True),
        ):
            self.server.requests.clear()
            self.script(reply(status, b"", {"Location": "/api/v1/next"}), reply(body={}))
            with self.subTest(status=status):
                self.client().query("SELECT 1")
                self.assertEqual(self.requests[1].method, method)
                self.assertEqual(bool(self.requests[1].body), has_body)
                self.assertEqual("Content-Type" in self.requests[1].headers, has_body)

    def test_redirect_to_other_schemes_is_refused(self) -> None:
        for location in ("ftp://127.0.0.1/x", "file:///etc/passwd", "data:,x"):
            self.script(reply(302, b"", {"Location": location}))
            with (
                self.subTest(location=location),
                self.assertRaisesRegex(dc.InvalidResponseError, "redirect"),
            ):
                self.client().list_datasets()

    def test_redirect_loop_stops(self) -> None:
        self.server.default = reply(302, b"", {"Location": "/api/v1/datasets"})
        with self.assertRaises(ServiceError) as caught:
            self.client().list_datasets()
        self.assertEqual(caught.exception.status, 302)
        self.assertIn("redirects", str(caught.exception))
        self.assertEqual(len(self.requests), 11)

    def test_a_3xx_left_is_an_error(self) -> None:
        self.script(reply(304, b""), reply(300, b"{}"))
        client = self.client()
        for status in (304, 300):
            with self.assertRaises(ServiceError) as caught:
                client.list_datasets()
            self.assertEqual(caught.exception.status, status)

    def test_a_post_a_redirect_turned_into_a_get_is_never_sent_again(self) -> None:
        for after_redirect in ("503", "refused"):
            self.server.requests.clear()
            target = (
                "/api/v1/result"
                if after_redirect == "503"
                else f"http://127.0.0.1:{free_port()}/result"
            )
            self.script(
                reply(303, b"", {"Location": target}),
                reply(503, {"message": "busy"}),
                reply(body={}),
            )
            with self.subTest(after_redirect=after_redirect), recorded_sleeps() as sleeps:
                with self.assertRaises(dc.DatasetClientError) as caught:
                    self.client(max_retries=3).query("SELECT 1")
                self.assertEqual([r.method for r in self.requests if r.method == "POST"], ["POST"])
                self.assertEqual(caught.exception.method, "GET")
                self.assertEqual((caught.exception.attempts, sleeps), (1, []))
            self.server.script.clear()

    def test_malformed_or_credentialed_redirects_are_invalid_responses(self) -> None:
        for location in (
            "http://127.0.0.1:99999/x",
            "http://127.0.0.1:port/x",
            "http://[::1/x",
            "http://" + "a" * 64 + ".example/x",
            "http://exa\x80mple.test/x",
            "http://exa%80mple.test/x",
            f"http://user:pw@127.0.0.1:{self.server.server_port}/x",
        ):
            self.server.requests.clear()
            self.script(reply(302, b"", {"Location": location}))
            with (
                self.subTest(location=location),
                self.assertRaises(dc.InvalidResponseError) as caught,
            ):
                self.client().list_datasets()
            self.assertIn("redirect", str(caught.exception))
            self.assertNotIn("pw@", str(caught.exception))
            self.assertEqual(len(self.requests), 1, "neither followed nor retried")
