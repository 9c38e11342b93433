"""The Python SDK against a real ``deskgrid up`` (DESKGRID_BIN, else
``deskgrid`` on PATH): run with ``python3 -m unittest discover -s tests``
from sdk/python."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import deskgrid  # noqa: E402
from deskgrid import actions  # noqa: E402
from deskgrid.aio import AsyncClient  # noqa: E402
from deskgrid.testing import DeskgridServer  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

JSONish = Dict[str, Any]

server: Optional[DeskgridServer] = None
model: Optional[ThreadingHTTPServer] = None
#: The folder whose subfolders sessions may use as workspaces.
workspaces = ""


class FakeAnthropic(BaseHTTPRequestHandler):
    """Answers every Messages call with a short final text, streamed in the
    Messages API's server-sent events (the one fake: an LLM provider)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def ev(name: str, data: Any) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        ev("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
           "model": "claude-test", "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}})  # fmt: skip
        ev("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        ev("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Done."}})
        ev("content_block_stop", {"type": "content_block_stop", "index": 0})
        ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}})
        ev("message_stop", {"type": "message_stop"})

    def log_message(self, format: str, *args: Any) -> None:
        pass


def setUpModule() -> None:
    global server, model, workspaces
    workspaces = tempfile.mkdtemp(prefix="dgpy-workspaces-")
    model = ThreadingHTTPServer(("127.0.0.1", 0), FakeAnthropic)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{model.server_address[1]}"
    server = DeskgridServer(
        ["-default-image", "", "-anthropic-api-key", "sk-test", "-anthropic-base-url", base, "-workspace-roots", workspaces]
    ).start()


def tearDownModule() -> None:
    if server is not None:
        server.stop()
    if model is not None:
        model.shutdown()
    if workspaces:
        import shutil

        shutil.rmtree(workspaces, ignore_errors=True)


def png_size(data: bytes) -> "tuple[int, int]":
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


class SessionTest(unittest.TestCase):
    """One session through create, act, exec, files, watch and delete."""

    @classmethod
    def setUpClass(cls) -> None:
        assert server is not None
        cls.dg = server.client()
        cls.s = cls.dg.sessions.create(width=640, height=480, labels={"suite": "python-sdk"})

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.s.delete()
        except deskgrid.NotFound:
            pass

    def test_created_running(self) -> None:
        self.assertTrue(self.s.id.startswith("s-"), self.s.id)
        self.assertEqual(self.s.state, "SESSION_STATE_RUNNING")
        self.assertEqual((self.s.width, self.s.height), (640, 480))
        got = self.dg.sessions.get(self.s.id)
        self.assertEqual(got.id, self.s.id)
        self.assertEqual(got.labels, {"suite": "python-sdk"})

    def test_list_finds_it_by_label_and_pages(self) -> None:
        ids = [x.id for x in self.dg.sessions.list(labels={"suite": "python-sdk"}, page_size=1)]
        self.assertIn(self.s.id, ids)
        none = list(self.dg.sessions.list(labels={"suite": "nobody"}))
        self.assertEqual(none, [])
        running = [x.id for x in self.dg.sessions.list(states=["RUNNING"], labels={"suite": "python-sdk"})]
        self.assertEqual(running, [self.s.id])
        self.assertEqual(list(self.dg.sessions.list(states=["SESSION_STATE_STOPPED"], labels={"suite": "python-sdk"})), [])

    def test_screenshot_is_png_of_the_screen(self) -> None:
        png = self.s.screenshot()
        self.assertEqual(png_size(png), (640, 480))
        small = self.s.screenshot(scale_to=(320, 240))
        self.assertEqual(png_size(small), (320, 240))
        jpeg = self.s.screenshot(format="jpeg", quality=50)
        self.assertEqual(jpeg[:2], b"\xff\xd8")

    def test_click_type_and_cursor(self) -> None:
        self.s.click(100, 120)
        self.assertEqual(self.s.cursor_position(), (100, 120))
        self.s.move_mouse(200, 210)
        self.s.type("héllo")
        self.s.key("Return")
        r = self.s.act(actions.mouse_move(33, 44), actions.cursor_position(), screenshot=True, scale_to=(160, 120))
        self.assertEqual(r["cursor"], {"x": 33, "y": 44})
        self.assertEqual(png_size(base64.b64decode(r["screenshot"]["data"])), (160, 120))

    def test_exec_output_and_exit_code(self) -> None:
        r = self.s.exec("sh", "-c", "echo out; echo err >&2; exit 3")
        self.assertEqual(r.stdout, b"out\n")
        self.assertEqual(r.stderr, b"err\n")
        self.assertEqual(r.exit_code, 3)
        r = self.s.exec("cat", stdin="from stdin", env={"A": "1"})
        self.assertEqual(r.stdout, b"from stdin")
        r = self.s.exec("sh", "-c", 'echo "$A"', env={"A": "b c"})
        self.assertEqual(r.text, "b c\n")
        parts = list(self.s.exec_stream("sh", "-c", "echo one; echo two"))
        self.assertEqual(parts[-1][0], "exit")
        self.assertEqual(b"".join(v for k, v in parts if k == "stdout"), b"one\ntwo\n")  # type: ignore[misc]

    def test_exec_as_root_reaches_the_node(self) -> None:
        # A session from no image has no user namespace of its own to be
        # root in: the node refuses, so the field was sent.
        with self.assertRaises(deskgrid.FailedPrecondition):
            self.s.exec("id", "-u", as_root=True)
        with self.assertRaises(deskgrid.FailedPrecondition):
            self.s.shell("id -u", as_root=True)

    def test_exec_timeout(self) -> None:
        r = self.s.exec("sleep", "30", timeout=0.5)
        self.assertTrue(r.timed_out, r)

    def test_shell_keeps_state(self) -> None:
        self.s.shell("cd /tmp && export X=kept")
        r = self.s.shell("echo $X $PWD")
        self.assertEqual(r.output.strip(), "kept /tmp")
        self.assertEqual(r.exit_code, 0)

    def test_files_round_trip(self) -> None:
        blob = bytes(range(256)) * 10
        self.s.files.write("dir-py/blob.bin", blob)
        self.assertEqual(self.s.files.read("dir-py/blob.bin"), blob)
        self.s.files.write("dir-py/a.txt", "text ✓")
        self.assertEqual(self.s.files.read_text("dir-py/a.txt"), "text ✓")
        names = {f["name"] for f in self.s.files.list("dir-py")}
        self.assertEqual(names, {"blob.bin", "a.txt"})
        self.assertEqual(b"".join(self.s.files.download("dir-py/blob.bin")), blob)
        r = self.s.exec("cat", "dir-py/a.txt")
        self.assertEqual(r.text, "text ✓")
        with self.assertRaises(deskgrid.NotFound) as cm:
            self.s.files.read("dir-py/missing.txt")
        self.assertEqual(cm.exception.status, 404)

    def test_history_records_the_calls(self) -> None:
        self.s.exec("true")
        entries = list(self.s.history())
        self.assertTrue(any(e.get("type") == "session.state_changed.v1" for e in entries), entries[:3])
        lines = self.s.export_history().splitlines()
        self.assertGreaterEqual(len(lines), 1)
        self.assertTrue(all(json.loads(x)["sessionId"] == self.s.id for x in lines))

    def test_viewer_token(self) -> None:
        t = self.s.viewer_token("view", ttl_seconds=60)
        self.assertTrue(t["token"])
        self.assertEqual(t["sessionId"], self.s.id)
        self.assertTrue(t["tokenId"] and t["expireTime"])


class ErrorTest(unittest.TestCase):
    def setUp(self) -> None:
        assert server is not None
        self.dg = server.client()

    def test_404_is_not_found(self) -> None:
        with self.assertRaises(deskgrid.NotFound) as cm:
            self.dg.sessions.get("s-aaaaaaaaaaaaaaaaaaaa")
        e = cm.exception
        self.assertEqual((e.status, e.code), (404, 5))
        self.assertIn("not found", e.message)
        self.assertIsInstance(e, deskgrid.DeskgridError)

    def test_400_is_invalid_argument_and_creates_nothing(self) -> None:
        before = {s.id for s in self.dg.sessions.list()}
        with self.assertRaises(deskgrid.InvalidArgument) as cm:
            self.dg.sessions.create(width=1)
        self.assertEqual((cm.exception.status, cm.exception.code), (400, 3))
        self.assertIn("display.width", cm.exception.message)
        self.assertEqual({s.id for s in self.dg.sessions.list()}, before)

    def test_401_without_key(self) -> None:
        assert server is not None
        with self.assertRaises(deskgrid.Unauthenticated) as cm:
            list(deskgrid.Client(server.url, "").sessions.list())
        self.assertEqual(cm.exception.status, 401)

    def test_wrong_key_is_refused(self) -> None:
        assert server is not None
        with self.assertRaises(deskgrid.Unauthenticated):
            deskgrid.Client(server.url, "dg_nope_nope").sessions.get("s-aaaaaaaaaaaaaaaaaaaa")

    def test_unreachable_is_unavailable_after_retries(self) -> None:
        tries: List[int] = []
        dead = deskgrid.Client(
            "http://" + deskgrid.testing.free_addr(), "k", retries=3, on_retry=lambda n, e, w: tries.append(n)
        )
        with self.assertRaises(deskgrid.Unavailable):
            dead.sessions.get("s-x")
        self.assertEqual(tries, [1, 2])

    def test_timeout_is_deadline_exceeded(self) -> None:
        assert server is not None
        # A listener that accepts and never answers.
        import socket as sk

        l = sk.socket()
        l.bind(("127.0.0.1", 0))
        l.listen(1)
        try:
            c = deskgrid.Client("http://127.0.0.1:%d" % l.getsockname()[1], "k", timeout=0.3)
            with self.assertRaises(deskgrid.DeadlineExceeded):
                c.sessions.get("s-x")
        finally:
            l.close()

    def test_stream_errors_map_too(self) -> None:
        gone = deskgrid.Session(self.dg, {"id": "s-aaaaaaaaaaaaaaaaaaaa"})
        with self.assertRaises(deskgrid.NotFound) as cm:
            gone.exec("true")
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("s-aaaaaaaaaaaaaaaaaaaa", cm.exception.message)
        with self.assertRaises(deskgrid.NotFound):
            list(gone.watch())


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_client(self) -> None:
        assert server is not None
        async with AsyncClient(server.url, server.api_key) as dg:
            async with await dg.sessions.create(width=320, height=240, labels={"suite": "aio"}) as s:
                sid = s.id
                await s.click(10, 20)
                self.assertEqual(await s.cursor_position(), (10, 20))
                self.assertEqual(png_size(await s.screenshot()), (320, 240))
                # Two calls at once on one loop.
                a, b = await asyncio.gather(s.exec("echo", "a"), s.exec("echo", "b"))
                self.assertEqual((a.stdout, b.stdout), (b"a\n", b"b\n"))
                await s.write_file("x.txt", "async")
                self.assertEqual(await s.read_file("x.txt"), b"async")
                self.assertEqual([x.id async for x in dg.sessions.list(labels={"suite": "aio"})], [sid])
                async for snap in s.watch():
                    self.assertEqual(snap["state"], "SESSION_STATE_RUNNING")
                    break
            self.assertIn((await dg.sessions.get(sid)).state, ("SESSION_STATE_STOPPED", "SESSION_STATE_STOPPING"))
            with self.assertRaises(deskgrid.NotFound):
                await dg.sessions.get("s-aaaaaaaaaaaaaaaaaaaa")


class RunTest(unittest.TestCase):
    def test_run_events_until_it_ends(self) -> None:
        assert server is not None
        dg = server.client()
        with dg.sessions.create(width=320, height=240) as s:
            run = s.run("Say done", provider="anthropic", model="claude-test", max_steps=2)
            self.assertTrue(run["id"].startswith("run-"), run)
            events = list(dg.runs.events(run["id"]))
            self.assertIn("Done.", "".join(e.get("textDelta", "") for e in events))
            seqs = [int(e["sequence"]) for e in events]
            self.assertEqual(seqs, sorted(set(seqs)))
            self.assertEqual(dg.runs.get(run["id"])["state"], "RUN_STATE_SUCCEEDED")
            # Resuming after a sequence yields only what came after it.
            later = list(dg.runs.events(run["id"], after_sequence=seqs[0]))
            self.assertEqual([int(e["sequence"]) for e in later], seqs[1:])
            self.assertEqual([r["id"] for r in dg.runs.list(s.id)], [run["id"]])
            # The run's history and transcript, once recorded, hold the answer.
            def answered() -> Optional[JSONish]:
                try:
                    x = dg.runs.transcript(run["id"])
                except deskgrid.NotFound:  # nothing recorded yet
                    return None
                return x if "Done." in json.dumps(x) else None

            t = eventually("the answer in the transcript", answered)
            self.assertEqual(t["runId"], run["id"])
            entries = list(dg.runs.entries(run["id"], page_size=2))
            self.assertTrue(entries)
            self.assertTrue(all(e.get("runId") == run["id"] for e in entries), entries[:2])


class LifeTest(unittest.TestCase):
    def setUp(self) -> None:
        assert server is not None
        self.dg = server.client()

    def test_context_manager_deletes_and_watch_sees_it_end(self) -> None:
        seen: List[str] = []
        with self.dg.sessions.create(width=320, height=240) as s:
            sid = s.id
            ready = threading.Event()

            def follow() -> None:
                for snap in s.watch():
                    seen.append(snap.get("state", ""))
                    ready.set()

            t = threading.Thread(target=follow, daemon=True)
            t.start()
            self.assertTrue(ready.wait(30), "watch yielded nothing")
            s.keepalive()
        t.join(30)
        self.assertFalse(t.is_alive(), "watch did not end with the session")
        self.assertEqual(seen[0], "SESSION_STATE_RUNNING")
        self.assertIn(seen[-1], ("SESSION_STATE_STOPPED", "SESSION_STATE_STOPPING"))
        self.assertIn(self.dg.sessions.get(sid).state, ("SESSION_STATE_STOPPED", "SESSION_STATE_STOPPING"))
        with self.assertRaises(deskgrid.DeskgridError):
            self.dg.sessions.get(sid).screenshot()

    def test_request_id_makes_create_idempotent(self) -> None:
        a = self.dg.sessions.create(width=320, height=240, request_id="py-sdk-req-1")
        try:
            b = self.dg.sessions.create(width=320, height=240, request_id="py-sdk-req-1")
            self.assertEqual(a.id, b.id)
        finally:
            a.delete()

    def test_rate_limit_429_is_retried_after_retry_after(self) -> None:
        # A deskgrid allowing one request a second per key: the burst of
        # calls below is answered 429 with Retry-After, and the client waits
        # and repeats them until each succeeds.
        with DeskgridServer(["-default-image", "", "-rate-limit", "1"]) as slow:
            retried: List[Any] = []
            dg = slow.client(on_retry=lambda n, e, w: retried.append((e.status, e.retry_after)))
            for _ in range(4):
                self.assertEqual(list(dg.sessions.list()), [])
            self.assertTrue(retried, "no call was refused")
            self.assertTrue(all(st == 429 and ra is not None and ra >= 1 for st, ra in retried), retried)
            once = slow.client(retries=1)
            with self.assertRaises(deskgrid.ResourceExhausted) as cm:
                for _ in range(10):
                    list(once.sessions.list())
            self.assertEqual(cm.exception.status, 429)
            self.assertIsNotNone(cm.exception.retry_after)


class TestingServerTest(unittest.TestCase):
    def test_sessions_run_on_the_machines_programs_unless_an_image_is_named(self) -> None:
        # As sdk/deskgridtest's: no desktop image imported into each test's
        # fresh data directory.
        with DeskgridServer() as srv:
            with srv.client().sessions.create(width=640, height=480) as s:
                self.assertNotIn("image", s.data, s.data)
                self.assertEqual(s.exec("sh", "-c", "echo $HOME").stdout, b"/home/user\n")
            self.assertNotIn("importing the default image", srv.logs())


def eventually(what: str, check: "Any", timeout: float = 30.0) -> Any:
    """Polls check() until it returns something true, or fails after timeout seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)


class DesktopApiTest(unittest.TestCase):
    """Windows, clipboard, processes and input leases of a session whose
    desktop runs a real X program (xmessage, started by autostart)."""

    @classmethod
    def setUpClass(cls) -> None:
        assert server is not None
        cls.dg = server.client()
        cls.s = cls.dg.sessions.create(width=640, height=480, autostart=["exec xmessage -name dgpy hello"])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.s.delete()

    def test_applications_and_accessibility(self) -> None:
        apps = self.s.applications()
        self.assertIsInstance(apps, list)
        for a in apps:
            self.assertTrue(a.get("id") and a.get("name"), a)
        with self.assertRaises(deskgrid.NotFound):
            self.s.launch("no-such-application-anywhere")
        # Opening what the session does not have, or a URL of another
        # scheme (what opens how is tested on the desktop image).
        with self.assertRaises(deskgrid.NotFound):
            self.s.open("no-such-file.txt")
        with self.assertRaises(deskgrid.InvalidArgument):
            self.s.open("mailto:someone@example.org")
        # This desktop runs no accessibility bus: the call says so, as a
        # precondition, not as an empty tree.
        with self.assertRaises(deskgrid.FailedPrecondition):
            self.s.accessibility_tree(max_depth=3)
        with self.assertRaises(deskgrid.InvalidArgument):
            self.s.accessibility_tree(max_depth=1000)
        # Acting needs the bus too; an id that is no node's is refused
        # first, and so is asking for two acts at once.
        with self.assertRaises(deskgrid.FailedPrecondition):
            self.s.act_on_accessible(":1.5:/org/a11y/atspi/accessible/1", text="hello")
        with self.assertRaises(deskgrid.InvalidArgument):
            self.s.act_on_accessible("not-a-node", action="click")
        with self.assertRaises(deskgrid.InvalidArgument):
            self.s.accessibility_tree(root="not-a-node")
        with self.assertRaises(ValueError):
            self.s.act_on_accessible(":1.5:/a", action="click", focus=True)

    def test_processes_list_the_autostart_program(self) -> None:
        procs = self.s.processes()
        mine = [p for p in procs if "xmessage -name dgpy hello" in " ".join(p.get("argv", []))]
        self.assertEqual(len(mine), 1, procs)
        self.assertEqual(mine[0]["state"], "PROCESS_STATE_RUNNING")
        self.assertTrue(mine[0]["processId"])

    def test_windows_list_move_activate_close(self) -> None:
        def find() -> Optional[JSONish]:
            return next((w for w in self.s.windows() if w.get("instance") == "dgpy"), None)

        win = eventually("xmessage's window", find)
        self.assertGreater(int(win["id"]), 0)
        self.assertTrue(win.get("mapped"), win)
        self.assertEqual(self.s.display()["width"], 640)
        moved = self.s.move_window(win["id"], 30, 40, 300, 120)
        self.assertEqual((moved["geometry"].get("x", 0), moved["geometry"].get("y", 0)), (30, 40), moved)
        self.assertEqual(moved["geometry"]["width"], 300)
        self.assertEqual(self.s.activate_window(win["id"])["id"], win["id"])
        with self.assertRaises(deskgrid.NotFound):
            self.s.activate_window(0x7FFFFFF)
        self.assertTrue(self.s.close_window(win["id"]))
        eventually("the window to go", lambda: find() is None)

    def test_recording_round_trip(self) -> None:
        with self.assertRaises(deskgrid.InvalidArgument):
            self.s.start_recording(fps=31)
        rec = self.s.start_recording(fps=10, width=320, height=240)
        try:
            self.assertEqual(rec["state"], "RECORDING_STATE_RECORDING", rec)
            self.assertEqual((rec["width"], rec["height"]), (320, 240))
            with self.assertRaises(deskgrid.AlreadyExists):
                self.s.start_recording()
            # The screen changes: xmessage's window moves.
            win = eventually("xmessage's window", lambda: next((w for w in self.s.windows() if w.get("instance") == "dgpy"), None))
            self.s.move_window(win["id"], 100, 120)
        finally:
            done = self.s.stop_recording(rec["id"])
        self.assertEqual(done["state"], "RECORDING_STATE_STOPPED", done)
        video = self.s.download_recording(rec["id"])
        self.assertEqual(video[4:8], b"ftyp")
        self.assertEqual(len(video), int(done["sizeBytes"]))
        listed = [r for r in self.s.recordings() if r["id"] == rec["id"]]
        self.assertTrue(listed and listed[0].get("downloadReady"), listed)
        with self.assertRaises(deskgrid.FailedPrecondition):
            self.s.stop_recording(rec["id"])
        with self.assertRaises(deskgrid.NotFound):
            self.s.download_recording("rec-nosuchrecording")

    def test_clipboard_round_trip(self) -> None:
        self.s.set_clipboard("héllo 世界")
        self.s.set_clipboard("mouse", primary=True)
        self.assertEqual(self.s.clipboard(), "héllo 世界")
        self.assertEqual(self.s.clipboard(primary=True), "mouse")
        with self.assertRaises(deskgrid.InvalidArgument):
            self.s.set_clipboard("x" * ((1 << 20) + 1))

    def test_input_lease(self) -> None:
        lease = self.s.acquire_input_lease("py-a", ttl=60)
        try:
            self.assertEqual(lease["holder"], "py-a")
            self.assertTrue(lease["leaseId"])
            token = int(lease["token"])
            self.s.act(actions.mouse_move(5, 6), lease_token=token)
            # Anyone may ask who holds it; its id stays with the holder.
            told = self.s.input_lease()
            self.assertEqual(told["lease"]["holder"], "py-a")
            self.assertEqual(told["lease"]["token"], lease["token"])
            self.assertFalse(told["lease"].get("leaseId"))
            # Someone else waits its turn, and gives up.
            with self.assertRaises(deskgrid.DeadlineExceeded) as cm:
                self.s.acquire_input_lease("py-b", wait=0.5)
            self.assertEqual(cm.exception.status, 504)
            renewed = self.s.renew_input_lease(lease, ttl=120)
            self.assertEqual(renewed["token"], lease["token"])
            self.assertGreater(renewed["expireTime"], lease["expireTime"])
        finally:
            self.s.release_input_lease(lease)
        self.assertFalse(self.s.input_lease().get("lease"))
        other = self.s.acquire_input_lease("py-b", wait=10)
        try:
            self.assertGreater(int(other["token"]), token)
            self.s.act(actions.mouse_move(7, 8), lease_token=int(other["token"]))
            # The old holder's token is fenced off once a newer one was used.
            with self.assertRaises(deskgrid.DeskgridError) as cm2:
                self.s.act(actions.mouse_move(9, 10), lease_token=token)
            self.assertIsInstance(cm2.exception, deskgrid.FailedPrecondition)
            self.assertIn("stale input lease", cm2.exception.message)
        finally:
            self.s.release_input_lease(other)


class SandboxApiTest(unittest.TestCase):
    """Changes against a workspace folder: list, diff, apply, discard;
    snapshots; the shell; the sandbox's description."""

    def setUp(self) -> None:
        assert server is not None
        self.dg = server.client()
        self.ws = tempfile.mkdtemp(prefix="ws-", dir=workspaces)
        with open(os.path.join(self.ws, "kept.txt"), "w") as f:
            f.write("one\n")
        self.s = self.dg.sessions.create(width=320, height=240, workspace=self.ws)

    def tearDown(self) -> None:
        self.s.delete()
        import shutil

        shutil.rmtree(self.ws, ignore_errors=True)

    def test_changes_diff_apply_discard(self) -> None:
        self.assertEqual(self.s.files.read_text("kept.txt"), "one\n")
        self.s.files.write("kept.txt", "one\ntwo\n")
        self.s.files.write("new.txt", "fresh")
        changes = {c["path"]: c for c in self.s.changes()}
        self.assertIn("new.txt", changes, changes)
        self.assertIn("kept.txt", changes, changes)
        d = self.s.diff("kept.txt")
        self.assertIn("+two", d["diff"])
        self.assertFalse(d.get("binary", False))
        r = self.s.apply_changes(["new.txt"])
        self.assertEqual(r.get("applied"), ["new.txt"], r)
        with open(os.path.join(self.ws, "new.txt")) as f:
            self.assertEqual(f.read(), "fresh")
        self.assertEqual(self.s.discard_changes(["kept.txt"]), ["kept.txt"])
        self.assertEqual(self.s.files.read_text("kept.txt"), "one\n")
        with open(os.path.join(self.ws, "kept.txt")) as f:
            self.assertEqual(f.read(), "one\n")

    def test_files_mkdir_move_stat_delete(self) -> None:
        self.s.files.mkdir("a/b/c", parents=True)
        self.s.files.write("a/b/c/x.txt", "x")
        self.s.files.move("a/b/c/x.txt", "a/y.txt")
        self.assertEqual(self.s.files.stat("a/y.txt")["size"], "1")
        with self.assertRaises(deskgrid.NotFound):
            self.s.files.stat("a/b/c/x.txt")
        self.s.files.delete("a", recursive=True)
        with self.assertRaises(deskgrid.NotFound):
            self.s.files.stat("a")

    def test_snapshots_shell_and_sandbox(self) -> None:
        self.assertFalse(self.s.sandbox().get("frozen", False))
        self.s.files.write("snap.txt", "before")
        snap = self.s.create_snapshot()
        self.s.files.write("snap.txt", "after")
        self.assertIn(snap["snapshotId"], [x["snapshotId"] for x in self.s.snapshots()])
        self.s.restore_snapshot(snap["snapshotId"])
        self.assertEqual(self.s.files.read_text("snap.txt"), "before")
        self.s.delete_snapshot(snap["snapshotId"])
        self.assertEqual(self.s.snapshots(), [])
        self.s.shell("export KEEP=1")
        self.assertEqual(self.s.shell("echo ${KEEP:-gone}").output.strip(), "1")
        self.s.restart_shell()
        self.assertEqual(self.s.shell("echo ${KEEP:-gone}").output.strip(), "gone")


class NodeAndHistoryApiTest(unittest.TestCase):
    def setUp(self) -> None:
        assert server is not None
        self.dg = server.client()

    def test_nodes(self) -> None:
        # deskgrid up is one node, shown like a cluster's (draining it is left
        # to the Go SDK's test, whose deskgrid no other test shares).
        nodes = self.dg.nodes.list()
        self.assertEqual([n["id"] for n in nodes], ["local"], nodes)
        self.assertEqual(nodes[0]["state"], "NODE_STATE_READY")
        self.assertEqual(self.dg.nodes.get("local")["id"], "local")
        for call in (
            lambda: self.dg.nodes.get("elsewhere"),
            lambda: self.dg.nodes.drain("elsewhere"),
            lambda: self.dg.nodes.undrain("elsewhere"),
        ):
            with self.assertRaises(deskgrid.NotFound) as cm:
                call()
            self.assertEqual(cm.exception.status, 404)

    def test_history_export_delete_import(self) -> None:
        s = self.dg.sessions.create(width=320, height=240)
        s.exec("true")
        s.delete()
        # History is recorded as events arrive: once the session's end is in
        # it, nothing more comes.
        def ended() -> Optional[bytes]:
            x = s.export_history()
            return x if b"SESSION_STATE_STOPPED" in x else None

        jsonl = eventually("the session's end in its history", ended)
        n = len(jsonl.splitlines())
        self.assertEqual(self.dg.history.delete(s.id), n)
        with self.assertRaises(deskgrid.NotFound):
            list(s.history())
        r = self.dg.history.import_session(s.id, jsonl)
        self.assertEqual(int(r.get("imported", 0)), n, r)
        self.assertEqual(len(list(s.history(page_size=2))), n)
        again = self.dg.history.import_session(s.id, jsonl)
        self.assertEqual((int(again.get("imported", 0)), int(again.get("skipped", 0))), (0, n), again)
        with self.assertRaises(deskgrid.InvalidArgument):
            self.dg.history.import_session(s.id, "not json\n")

    def test_images_usage(self) -> None:
        u = self.dg.images.usage()
        self.assertIsInstance(u, dict)
        with self.assertRaises(deskgrid.NotFound):
            self.dg.images.set_public("no/such-image:v1", True)
        # One machine is one node: naming it changes nothing.
        local = self.dg.images.on_node("local")
        self.assertEqual([i["ref"] for i in local.list()], [i["ref"] for i in self.dg.images.list()])
        self.assertEqual(local.usage(), self.dg.images.usage())
        with self.assertRaises(deskgrid.NotFound):
            local.get("no/such-image:v1")

    async def _async_twins(self) -> None:
        assert server is not None
        async with AsyncClient(server.url, server.api_key) as dg:
            self.assertEqual([n["id"] for n in await dg.nodes.list()], ["local"])
            async with await dg.sessions.create(width=320, height=240) as s:
                await s.set_clipboard("async ✓")
                self.assertEqual(await s.clipboard(), "async ✓")
                self.assertEqual((await s.display())["height"], 240)

    def test_async_twins(self) -> None:
        asyncio.run(self._async_twins())


class TypesTest(unittest.TestCase):
    def test_mypy_strict(self) -> None:
        # mypy is Debian's package (scripts/setup --dev installs it).
        p = subprocess.run(
            ["mypy", "--strict", "--cache-dir", os.path.join(tempfile.gettempdir(), "deskgrid-mypy"),
             "deskgrid"],
            cwd=os.path.dirname(HERE), capture_output=True, timeout=300,
        )  # fmt: skip
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr).decode())


class PackageTest(unittest.TestCase):
    def test_wheel_builds_offline_and_installs(self) -> None:
        # As the README says: pip with Debian's setuptools and wheel, no index.
        py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        with tempfile.TemporaryDirectory() as d:
            for args in (
                ["wheel", "--no-build-isolation", "--no-deps", "-q", "-w", d, os.path.dirname(HERE)],
                ["install", "--no-deps", "--no-index", "-q", "--target", os.path.join(d, "site"),
                 os.path.join(d, "deskgrid-%s-py3-none-any.whl" % deskgrid.__version__)],
            ):  # fmt: skip
                p = subprocess.run([py, "-m", "pip", *args], capture_output=True, timeout=300,
                                   env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_ROOT_USER_ACTION="ignore"))  # fmt: skip
                self.assertEqual(p.returncode, 0, p.stderr.decode())
            p = subprocess.run(
                [py, "-c", "import deskgrid, deskgrid.aio, deskgrid.testing; print(deskgrid.__file__)"],
                env=dict(os.environ, PYTHONPATH=os.path.join(d, "site")), cwd=d, capture_output=True, timeout=60,
            )  # fmt: skip
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            self.assertTrue(p.stdout.decode().startswith(os.path.join(d, "site")), p.stdout)
            self.assertTrue(os.path.exists(os.path.join(d, "site", "deskgrid", "py.typed")))


class ExampleTest(unittest.TestCase):
    def test_quickstart_example(self) -> None:
        assert server is not None
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "shot.png")
            env = dict(os.environ, DESKGRID_URL=server.url, DESKGRID_API_KEY=server.api_key,
                       PYTHONPATH=os.path.dirname(HERE))  # fmt: skip
            p = subprocess.run(
                [sys.executable, os.path.join(REPO, "examples", "python", "quickstart.py"), out],
                env=env,
                capture_output=True,
                timeout=120,
            )
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            with open(out, "rb") as f:
                self.assertEqual(png_size(f.read()), (1024, 768))
            self.assertIn(b"hello from Linux", p.stdout)

    def test_parallel_example(self) -> None:
        assert server is not None
        env = dict(os.environ, DESKGRID_URL=server.url, DESKGRID_API_KEY=server.api_key,
                   PYTHONPATH=os.path.dirname(HERE))  # fmt: skip
        p = subprocess.run(
            [sys.executable, os.path.join(REPO, "examples", "python", "parallel.py"), "3"],
            env=env, capture_output=True, timeout=180,
        )  # fmt: skip
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        self.assertIn(b"3/3 tasks passed", p.stdout)
        ids = {json.loads(x)["session"] for x in p.stdout.splitlines() if x.startswith(b"{")}
        self.assertEqual(len(ids), 3)
        dg = server.client()
        self.assertTrue(all(dg.sessions.get(i).state in ("SESSION_STATE_STOPPED", "SESSION_STATE_STOPPING") for i in ids))

    def test_agent_loop_example(self) -> None:
        assert server is not None
        env = dict(os.environ, DESKGRID_URL=server.url, DESKGRID_API_KEY=server.api_key,
                   PYTHONPATH=os.path.dirname(HERE))  # fmt: skip
        p = subprocess.run(
            [sys.executable, os.path.join(REPO, "examples", "python", "agent_loop.py")],
            env=env, capture_output=True, timeout=120,
        )  # fmt: skip
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        self.assertEqual(
            p.stdout.decode().splitlines(),
            ["step 1: click, type", "step 2: key", "step 3: result: done"],
        )

    def test_readme_example(self) -> None:
        assert server is not None
        with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        section = readme[readme.index("### Python and TypeScript SDKs"):]
        code = section[section.index("```python\n") + 10:]
        code = code[: code.index("```")]
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, DESKGRID_URL=server.url, DESKGRID_API_KEY=server.api_key,
                       PYTHONPATH=os.path.dirname(HERE))  # fmt: skip
            p = subprocess.run([sys.executable, "-c", code], cwd=d, env=env, capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            with open(os.path.join(d, "shot.png"), "rb") as f:
                self.assertEqual(png_size(f.read()), (1024, 768))


if __name__ == "__main__":
    unittest.main()
