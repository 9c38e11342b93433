"""The deskgrid client over the REST/JSON API."""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)
from types import TracebackType
from urllib.parse import quote

from . import actions as A
from ._http import DEFAULT_TIMEOUT, RawBody, Transport
from .errors import DeskgridError, FailedPrecondition, NotFound, StreamError

__all__ = ["Client", "Session", "Sessions", "Files", "ExecResult", "ShellResult", "Runs", "Images", "History", "Nodes"]

JSON = Dict[str, Any]


def _q(s: str) -> str:
    return quote(s, safe="")


def _dur(seconds: Optional[float]) -> Optional[str]:
    return None if seconds is None else f"{seconds:g}s"


def _b64(data: Union[bytes, str]) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return base64.b64encode(data).decode("ascii")


def _unb64(s: Optional[str]) -> bytes:
    return base64.b64decode(s) if s else b""


@dataclass
class ExecResult:
    """How a command ended and what it printed."""

    stdout: bytes
    stderr: bytes
    exit_code: int
    signal: str = ""
    timed_out: bool = False

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8."""
        return self.stdout.decode("utf-8", "replace")


@dataclass
class ShellResult:
    """What a command in the session's persistent shell printed."""

    output: str
    exit_code: int
    timed_out: bool = False
    truncated: bool = False


class Client:
    """A deskgrid deployment, reached over its REST gateway.

    ``base_url`` defaults to ``$DESKGRID_URL`` or http://127.0.0.1:8080 and
    ``api_key`` to ``$DESKGRID_API_KEY``. ``timeout`` bounds each call in
    seconds (for streams: each wait for the next message). Calls refused
    with 429 are repeated after the server's Retry-After, and calls safe to
    repeat (reads, deletes, creates that carry a request id) also when the
    server is unavailable, up to ``retries`` tries in all.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = 4,
        max_retry_wait: float = 30.0,
        on_retry: Optional[Callable[[int, DeskgridError, float], None]] = None,
    ) -> None:
        base_url = base_url or os.environ.get("DESKGRID_URL") or "http://127.0.0.1:8080"
        if api_key is None:
            api_key = os.environ.get("DESKGRID_API_KEY") or None
        self.transport = Transport(
            base_url, api_key, timeout=timeout, retries=retries, max_retry_wait=max_retry_wait, on_retry=on_retry
        )
        #: Sessions: create, get, list, delete.
        self.sessions = Sessions(self)
        #: Agent runs.
        self.runs = Runs(self)
        #: OCI images the sessions run.
        self.images = Images(self)
        #: Session history across sessions.
        self.history = History(self)
        #: The nodes that run sessions.
        self.nodes = Nodes(self)

    @property
    def base_url(self) -> str:
        return self.transport.base_url

    def close(self) -> None:
        """Releases the client (each call uses its own connection; nothing is held)."""

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def ready(self) -> bool:
        """Whether every backend answers (``/readyz``)."""
        try:
            self.transport.call_raw("GET", "/readyz", accept="*/*", idempotent=False)
            return True
        except DeskgridError:
            return False


class Sessions:
    """The session API: ``client.sessions``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self,
        *,
        width: Optional[int] = None,
        height: Optional[int] = None,
        depth: Optional[int] = None,
        dpi: Optional[int] = None,
        image: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        node_selector: Optional[Mapping[str, str]] = None,
        autostart: Optional[Sequence[str]] = None,
        workspace: Optional[str] = None,
        ttl: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        network: bool = False,
        memory_bytes: Optional[int] = None,
        cpu_millis: Optional[int] = None,
        pids: Optional[int] = None,
        disk_bytes: Optional[int] = None,
        request_id: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Session":
        """Starts a session and returns once its desktop answers.

        ``ttl`` and ``idle_timeout`` are seconds. The request id (one is
        picked when none is given) makes a retried create return the first
        session rather than start a second.
        """
        display: JSON = {}
        for k, v in (("width", width), ("height", height), ("depth", depth), ("dpi", dpi)):
            if v is not None:
                display[k] = v
        limits: JSON = {}
        for k, v in (("memoryBytes", memory_bytes), ("cpuMillis", cpu_millis), ("pids", pids), ("diskBytes", disk_bytes)):
            if v is not None:
                limits[k] = str(v)
        body: JSON = {"requestId": request_id or secrets.token_hex(16)}
        if display:
            body["display"] = display
        if limits:
            body["limits"] = limits
        if labels:
            body["labels"] = dict(labels)
        if node_selector:
            body["nodeSelector"] = dict(node_selector)
        if autostart:
            body["autostart"] = list(autostart)
        if workspace:
            body["workspace"] = workspace
        if image:
            body["image"] = image
        if ttl is not None:
            body["ttl"] = _dur(ttl)
        if idle_timeout is not None:
            body["idleTimeout"] = _dur(idle_timeout)
        if network:
            body["network"] = True
        data = self._c.transport.call(
            "POST", "/v1/sessions", body=body, idempotent=True, timeout=timeout or max(self._c.transport.timeout, 120.0)
        )
        return Session(self._c, data)

    def get(self, session_id: str) -> "Session":
        """Returns a session by id (NotFound when the caller has none such)."""
        return Session(self._c, self._c.transport.call("GET", f"/v1/sessions/{_q(session_id)}"))

    def list(
        self,
        *,
        states: Optional[Sequence[str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        page_size: int = 100,
    ) -> Iterator["Session"]:
        """Yields every session that matches, fetching pages as it goes.
        ``states`` are names such as "SESSION_STATE_RUNNING" (or "RUNNING")."""
        token = ""
        st = [s if s.startswith("SESSION_STATE_") else "SESSION_STATE_" + s.upper() for s in states or []]
        while True:
            query: Dict[str, Any] = {"pageSize": page_size, "pageToken": token, "states": st}
            for k, v in (labels or {}).items():
                query[f"labels[{k}]"] = v
            page = self._c.transport.call("GET", "/v1/sessions", query=query)
            for s in page.get("sessions", []):
                yield Session(self._c, s)
            token = page.get("nextPageToken", "")
            if not token:
                return

    def delete(self, session_id: str) -> None:
        """Stops a session and frees what it used."""
        self._c.transport.call("DELETE", f"/v1/sessions/{_q(session_id)}")


class Session:
    """One desktop. ``data`` is the session's JSON as last read."""

    def __init__(self, client: Client, data: JSON) -> None:
        self._c = client
        self.data: JSON = data
        #: The session's file API.
        self.files = Files(self)

    def __repr__(self) -> str:
        return f"<deskgrid.Session {self.id} {self.state}>"

    # --- what it is ---

    @property
    def id(self) -> str:
        return str(self.data.get("id", ""))

    @property
    def state(self) -> str:
        """Such as "SESSION_STATE_RUNNING"."""
        return str(self.data.get("state", ""))

    @property
    def width(self) -> int:
        return int(self.data.get("display", {}).get("width", 0))

    @property
    def height(self) -> int:
        return int(self.data.get("display", {}).get("height", 0))

    @property
    def labels(self) -> Dict[str, str]:
        return dict(self.data.get("labels", {}))

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sessions/{_q(self.id)}{suffix}"

    def _call(self, method: str, suffix: str, **kw: Any) -> Any:
        return self._c.transport.call(method, self._path(suffix), **kw)

    # --- life ---

    def __enter__(self) -> "Session":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.delete()
        except NotFound:
            pass

    def refresh(self) -> "Session":
        """Reads the session again."""
        self.data = self._call("GET", "")
        return self

    def delete(self) -> None:
        """Stops the session."""
        self.data = self._call("DELETE", "")

    def keepalive(self) -> None:
        """Resets the session's idle timer."""
        self.data = self._call("POST", ":keepalive", idempotent=True)

    def suspend(self, mode: Optional[str] = None) -> None:
        """Suspends the session ("SUSPEND_MODE_FREEZE", ...; None: the server's choice)."""
        self.data = self._call("POST", ":suspend", body={"mode": mode} if mode else {}, timeout=120.0)

    def resume(self) -> None:
        """Resumes a suspended session."""
        self.data = self._call("POST", ":resume", timeout=120.0)

    def commit(self, image: str) -> JSON:
        """Turns the session's changes into a new image tagged ``image``
        (such as "my-team/qa-desktop:v3"), on top of the session's image;
        returns ``image``, ``digest`` and ``size``."""
        result: JSON = self._call("POST", ":commit", body={"image": image}, timeout=max(self._c.transport.timeout, 600.0))
        return result

    def watch(self, *, timeout: Optional[float] = None) -> Iterator[JSON]:
        """Yields the session's JSON now and after every change, until it
        ends. ``timeout`` bounds each wait for a change (None: no bound)."""
        for m in self._c.transport.stream("GET", self._path(":watch"), timeout=timeout or 24 * 3600.0):
            s = m.get("session")
            if s:
                self.data = s
                yield s

    # --- display ---

    def screenshot(
        self,
        *,
        format: str = "png",
        quality: Optional[int] = None,
        scale_to: Optional[Tuple[int, int]] = None,
        region: Optional[Tuple[int, int, int, int]] = None,
        cursor: bool = False,
    ) -> bytes:
        """The screen as PNG (or JPEG with ``format="jpeg"``) bytes, of a
        ``region`` (x, y, width, height) when given, scaled to ``scale_to``
        (width, height) when given."""
        query: Dict[str, Any] = {"format": "IMAGE_FORMAT_" + format.upper(), "quality": quality, "cursor": cursor}
        if scale_to:
            query["scaleTo.width"], query["scaleTo.height"] = scale_to
        if region:
            query["region.x"], query["region.y"], query["region.width"], query["region.height"] = region
        raw, ctype = self._c.transport.call_raw("GET", self._path("/screenshot"), query=query, accept="image/*")
        if ctype.startswith("application/json"):  # an older gateway: base64 in JSON
            import json

            return _unb64(json.loads(raw).get("data"))
        return raw

    def act(
        self,
        *actions: A.Action,
        screenshot: bool = False,
        scale_to: Optional[Tuple[int, int]] = None,
        screenshot_format: Optional[str] = None,
        lease_token: Optional[str] = None,
        settle: Optional[JSON] = None,
    ) -> JSON:
        """Performs actions (see :mod:`deskgrid.actions`) in order, and
        returns the reply: ``cursor``, ``images`` of zooms and, with
        ``screenshot=True``, ``screenshot`` ({"data": base64, ...}) of the
        screen afterwards, scaled to ``scale_to`` when given."""
        body: JSON = {"actions": list(actions)}
        if screenshot:
            body["screenshot"] = True
        if scale_to:
            body["scaleTo"] = {"width": scale_to[0], "height": scale_to[1]}
        if screenshot_format:
            body["screenshotFormat"] = "IMAGE_FORMAT_" + screenshot_format.upper()
        if lease_token:
            body["leaseToken"] = lease_token
        if settle is not None:
            body["settle"] = settle
        result: JSON = self._call("POST", "/actions", body=body)
        return result

    def click(self, x: int, y: int, *, button: str = "left", clicks: int = 1) -> None:
        """Clicks at (x, y)."""
        self.act(A.click(x, y, button=button, clicks=clicks))

    def double_click(self, x: int, y: int) -> None:
        self.act(A.double_click(x, y))

    def right_click(self, x: int, y: int) -> None:
        self.act(A.right_click(x, y))

    def move_mouse(self, x: int, y: int) -> None:
        """Moves the pointer to (x, y)."""
        self.act(A.mouse_move(x, y))

    def drag(self, *path: Tuple[int, int]) -> None:
        """Drags with the left button along the points."""
        self.act(A.drag(path))

    def scroll(self, x: int, y: int, dy: int = 0, dx: int = 0) -> None:
        """Turns the wheel at (x, y): dy > 0 scrolls down."""
        self.act(A.scroll(x, y, dy, dx))

    def key(self, chord: str) -> None:
        """Presses a chord such as "ctrl+l" or "Return"."""
        self.act(A.key(chord))

    def type(self, text: str) -> None:
        """Types text, any Unicode."""
        self.act(A.type(text))

    def cursor_position(self) -> Tuple[int, int]:
        """Where the pointer is."""
        c = self.act(A.cursor_position()).get("cursor", {})
        return int(c.get("x", 0)), int(c.get("y", 0))

    def display(self) -> JSON:
        """The session's X display: ``width``, ``height``, ``depth``,
        ``dpi``, ``xDisplay`` and its ``windows``."""
        result: JSON = self._call("GET", "/display")
        return result

    def resize(self, width: int, height: int) -> JSON:
        """Changes the size of the screen; windows stay open and screenshots
        and input follow the new size. Returns the display afterwards."""
        result: JSON = self._call("POST", "/display:resize", body={"width": width, "height": height}).get("display", {})
        return result

    def clipboard(self, *, primary: bool = False) -> str:
        """The text a program on the desktop copied (the CLIPBOARD
        selection, or PRIMARY, the mouse selection); "" when there is none."""
        r = self._call("GET", "/clipboard", query={"selection": "SELECTION_PRIMARY" if primary else None})
        return str(r.get("text", ""))

    def set_clipboard(self, text: str, *, primary: bool = False, lease_token: Optional[int] = None) -> None:
        """Puts text (at most 1 MiB) on the clipboard (or the PRIMARY
        selection) for the desktop's programs to paste."""
        body: JSON = {"text": text}
        if primary:
            body["selection"] = "SELECTION_PRIMARY"
        if lease_token:
            body["leaseToken"] = str(lease_token)
        self._call("POST", "/clipboard", body=body, idempotent=True)

    def windows(self) -> List[JSON]:
        """The desktop's top-level windows, bottom to top: ``id``,
        ``title``, ``class``, ``geometry``, ``focused``, ``pid``, ..."""
        result: List[JSON] = self._call("GET", "/windows").get("windows", [])
        return result

    def _window(self, window_id: int, op: str, body: JSON, lease_token: Optional[int]) -> JSON:
        if lease_token:
            body["leaseToken"] = str(lease_token)
        result: JSON = self._call("POST", f"/windows/{int(window_id)}:{op}", body=body)
        return result

    def activate_window(self, window_id: int, *, lease_token: Optional[int] = None) -> JSON:
        """Raises a window and gives it the focus; returns the window afterwards."""
        result: JSON = self._window(window_id, "activate", {}, lease_token).get("window", {})
        return result

    def close_window(self, window_id: int, *, force: bool = False, lease_token: Optional[int] = None) -> bool:
        """Asks a window's program to close it (``force``: destroys it) and
        says whether the window is gone."""
        body: JSON = {"force": True} if force else {}
        return bool(self._window(window_id, "close", body, lease_token).get("closed", False))

    def move_window(
        self, window_id: int, x: int, y: int, width: int = 0, height: int = 0, *, lease_token: Optional[int] = None
    ) -> JSON:
        """Puts a window's client area at (x, y) with the given size (0
        keeps it); returns the window afterwards."""
        geometry: JSON = {"x": x, "y": y, "width": width, "height": height}
        result: JSON = self._window(window_id, "move", {"geometry": geometry}, lease_token).get("window", {})
        return result

    def set_window_state(self, window_id: int, state: str, *, lease_token: Optional[int] = None) -> JSON:
        """Minimises, maximises, makes full-screen or restores a window
        (state "minimized", "maximized", "fullscreen", "normal" or a full
        name such as "WINDOW_STATE_MAXIMIZED"); it needs a window manager."""
        if not state.startswith("WINDOW_STATE_"):
            state = "WINDOW_STATE_" + state.upper()
        result: JSON = self._window(window_id, "setState", {"state": state}, lease_token).get("window", {})
        return result

    # --- input lease ---

    def acquire_input_lease(self, holder: str, *, ttl: Optional[float] = None, wait: Optional[float] = None) -> JSON:
        """Waits its turn (first come, first served) for the session's input
        lease, at most ``wait`` seconds (None: the call's timeout), and holds
        it ``ttl`` seconds (None: 30). Returns the lease: ``token`` (pass it
        as ``lease_token`` of actions), ``leaseId`` and ``expireTime``."""
        body: JSON = {"holder": holder}
        if ttl is not None:
            body["ttl"] = _dur(ttl)
        if wait is not None:
            body["wait"] = _dur(wait)
        t = max(self._c.transport.timeout, (wait or 0) + 30)
        result: JSON = self._call("POST", "/inputLease:acquire", body=body, timeout=t)
        return result

    def input_lease(self) -> JSON:
        """Who holds the session's input lease now: ``lease`` (``holder``,
        ``token``, ``expireTime``; absent when nobody holds it) and
        ``waiting``, how many callers wait for it. The ``leaseId`` is never
        told."""
        result: JSON = self._call("GET", "/inputLease")
        return result

    def renew_input_lease(self, lease: Mapping[str, Any], *, ttl: Optional[float] = None) -> JSON:
        """Extends a lease the caller still holds by ``ttl`` seconds (None:
        30); returns it with its new ``expireTime``."""
        body: JSON = {k: lease.get(k) for k in ("holder", "token", "leaseId") if lease.get(k)}
        if ttl is not None:
            body["ttl"] = _dur(ttl)
        result: JSON = self._call("POST", "/inputLease:renew", body=body)
        return result

    def release_input_lease(self, lease: Mapping[str, Any]) -> None:
        """Gives the lease up, to the next caller waiting for it."""
        body: JSON = {k: lease.get(k) for k in ("holder", "token", "leaseId") if lease.get(k)}
        self._call("POST", "/inputLease:release", body=body)

    def viewer_token(self, mode: str = "view", ttl_seconds: Optional[int] = None) -> JSON:
        """A short-lived token for the live view ("view" or "control"):
        ``token``, ``tokenId``, ``url``, ``expireTime``."""
        body: JSON = {"mode": mode}
        if ttl_seconds:
            body["ttl_seconds"] = ttl_seconds
        result: JSON = self._call("POST", "/viewerToken", body=body)
        return result

    # --- sandbox ---

    def exec_stream(
        self,
        *argv: str,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[bytes, str, None] = None,
        timeout: Optional[float] = None,
        as_root: bool = False,
    ) -> Iterator[Tuple[str, Union[bytes, JSON]]]:
        """Runs argv in the session's sandbox and yields its output as it
        comes: ("stdout", bytes), ("stderr", bytes), and last ("exit",
        {"exitCode": ..., "signal": ..., "timedOut": ...}). ``timeout`` is
        the command's own limit, in seconds. ``as_root`` runs it as root of
        the session's own user namespace (a session from an image: to
        ``apt-get install``, write /etc), which is not the host's root."""
        if not argv:
            raise ValueError("exec needs a command")
        body: JSON = {"argv": list(argv)}
        if env:
            body["env"] = [f"{k}={v}" for k, v in env.items()]
        if cwd:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin"] = _b64(stdin)
        if timeout is not None:
            body["timeout"] = _dur(timeout)
        if as_root:
            body["asRoot"] = True
        read_timeout = max(self._c.transport.timeout, (timeout or 0) + 30)
        for m in self._c.transport.stream("POST", self._path(":exec"), body=body, timeout=read_timeout):
            if "stdout" in m:
                yield "stdout", _unb64(m["stdout"])
            elif "stderr" in m:
                yield "stderr", _unb64(m["stderr"])
            elif "exit" in m:
                yield "exit", m["exit"] or {}
                return

    def exec(
        self,
        *argv: str,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[bytes, str, None] = None,
        timeout: Optional[float] = None,
        as_root: bool = False,
    ) -> ExecResult:
        """Runs argv in the session's sandbox and waits for it (``as_root``:
        see exec_stream)."""
        out: List[bytes] = []
        err: List[bytes] = []
        for kind, v in self.exec_stream(*argv, env=env, cwd=cwd, stdin=stdin, timeout=timeout, as_root=as_root):
            if kind == "stdout":
                out.append(v)  # type: ignore[arg-type]
            elif kind == "stderr":
                err.append(v)  # type: ignore[arg-type]
            else:
                assert isinstance(v, dict)
                return ExecResult(
                    stdout=b"".join(out),
                    stderr=b"".join(err),
                    exit_code=int(v.get("exitCode", 0)),
                    signal=str(v.get("signal", "")),
                    timed_out=bool(v.get("timedOut", False)),
                )
        raise StreamError("exec: the stream ended without an exit status")

    def shell(self, command: str, *, timeout: Optional[float] = None, as_root: bool = False) -> ShellResult:
        """Runs a command in the session's persistent shell: its directory
        and exported variables carry over to the next command. ``as_root``
        uses the session's root shell instead, a second persistent shell as
        root of the session's own user namespace (sessions from an image)."""
        body: JSON = {"command": command}
        if timeout is not None:
            body["timeout"] = _dur(timeout)
        if as_root:
            body["asRoot"] = True
        r = self._call("POST", "/shell:run", body=body, timeout=max(self._c.transport.timeout, (timeout or 0) + 30))
        return ShellResult(
            output=_unb64(r.get("output")).decode("utf-8", "replace"),
            exit_code=int(r.get("exitCode", 0)),
            timed_out=bool(r.get("timedOut", False)),
            truncated=bool(r.get("truncated", False)),
        )

    def changes(self, path: str = "") -> List[JSON]:
        """What the session changed in its filesystem."""
        result: List[JSON] = self._call("GET", "/changes", query={"path": path}).get("changes", [])
        return result

    def snapshots(self) -> List[JSON]:
        """The session's snapshots."""
        result: List[JSON] = self._call("GET", "/snapshots").get("snapshots", [])
        return result

    def create_snapshot(self, **body: Any) -> JSON:
        """Snapshots the session's filesystem."""
        result: JSON = self._call("POST", "/snapshots", body=body, timeout=120.0)
        return result

    def restore_snapshot(self, snapshot_id: str) -> JSON:
        """Puts the session's filesystem back as the snapshot saved it."""
        result: JSON = self._call("POST", f"/snapshots/{_q(snapshot_id)}:restore", timeout=120.0)
        return result

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Deletes one of the session's snapshots."""
        self._call("DELETE", f"/snapshots/{_q(snapshot_id)}")

    def diff(self, path: str) -> JSON:
        """A changed file's unified diff against the session's image:
        ``change``, ``diff`` (text) and ``binary``."""
        result: JSON = self._call("GET", "/changes:diff", query={"path": path})
        return result

    def apply_changes(self, paths: Optional[Sequence[str]] = None) -> JSON:
        """Writes the session's changes (those under ``paths``, or all) into
        its workspace folder; a file changed in the workspace meanwhile is
        left alone. Returns ``applied`` paths and ``conflicts``."""
        result: JSON = self._call("POST", "/changes:apply", body={"paths": list(paths or [])}, timeout=120.0)
        return result

    def discard_changes(self, paths: Optional[Sequence[str]] = None) -> List[str]:
        """Drops the session's changes (those under ``paths``, or all), so
        its image shows through again; refused while processes run in the
        sandbox. Returns the paths put back."""
        r = self._call("POST", "/changes:discard", body={"paths": list(paths or [])}, timeout=120.0)
        return [str(p) for p in r.get("discarded", [])]

    def restart_shell(self) -> None:
        """Ends the persistent shell; the next :meth:`shell` starts afresh."""
        self._call("POST", "/shell:restart")

    def sandbox(self) -> JSON:
        """The session's sandbox: ``image``, ``limits``, ``usage``, ``frozen``, ..."""
        result: JSON = self._call("GET", "/sandbox")
        return result

    def applications(self) -> List[JSON]:
        """The programs the session's desktop menu offers (its image's
        ``.desktop`` entries): ``id``, ``name``, ``comment``, ``exec``."""
        result: List[JSON] = self._call("GET", "/applications").get("applications", [])
        return result

    def launch(self, application: str, *args: str, lease_token: Optional[int] = None) -> JSON:
        """Starts a program of :meth:`applications` on the desktop, by id or
        name, with files or URLs as ``args``; returns ``application`` and the
        started ``process``. A launch is input: pass the input lease's
        ``token`` as ``lease_token`` while leases are in use."""
        body: JSON = {"application": application, "args": list(args)}
        if lease_token:
            body["leaseToken"] = str(lease_token)
        result: JSON = self._call("POST", "/applications:launch", body=body)
        return result

    def open(self, target: str, *, lease_token: Optional[int] = None) -> JSON:
        """Opens a file of the session (a path relative to its user's home,
        or absolute) or an ``http``, ``https`` or ``file`` URL with the
        session's default application for it, as its file manager would;
        returns the ``application``, the started ``process``, the
        ``target`` handed to it and the ``contentType`` it was chosen for.
        A path the session does not have is :class:`NotFound`; a type no
        application opens :class:`FailedPrecondition`. An open is input,
        as a launch is: pass ``lease_token`` while leases are in use."""
        body: JSON = {"target": target}
        if lease_token:
            body["leaseToken"] = str(lease_token)
        result: JSON = self._call("POST", "/applications:open", body=body)
        return result

    def accessibility_tree(
        self,
        *,
        max_depth: Optional[int] = None,
        max_nodes: Optional[int] = None,
        only_visible: bool = False,
        application: Optional[str] = None,
        root: Optional[str] = None,
        window_id: Optional[int] = None,
        focused_window: bool = False,
        pid: Optional[int] = None,
        osworld_xml: bool = False,
    ) -> JSON:
        """The desktop's accessibility tree (AT-SPI): ``applications``, each
        a node with ``id``, ``role``, ``name``, ``states``, ``actions``,
        ``bounds`` and ``children``; ``truncated`` when the bounds cut it.
        ``root``, a node's ``id``, reads only that node's subtree;
        ``window_id`` (an X window id), ``focused_window`` and ``pid`` (a
        process of the session and those it started) one window's or
        process's. With ``osworld_xml``, OSWorld's ``{"AT": xml}``."""
        query: Dict[str, Any] = {
            "maxDepth": max_depth,
            "maxNodes": max_nodes,
            "onlyVisible": "true" if only_visible else None,
            "application": application,
            "root": root,
            "windowId": window_id,
            "focusedWindow": "true" if focused_window else None,
            "pid": pid,
            "format": "ACCESSIBILITY_FORMAT_OSWORLD_XML" if osworld_xml else None,
        }
        result: JSON = self._call("GET", "/accessibility", query=query)
        return result

    def act_on_accessible(
        self,
        node_id: str,
        *,
        action: Optional[str] = None,
        text: Optional[str] = None,
        focus: bool = False,
        lease_token: Optional[int] = None,
    ) -> Optional[JSON]:
        """Acts on the node of :meth:`accessibility_tree` whose ``id`` is
        ``node_id``, through its application: performs its ``action`` by
        name (``"click"``, ``"press"``...), replaces its editable ``text``
        (``""`` clears it), or gives it the ``focus``; exactly one. Returns
        the node afterwards, or None when the act made it go away. A stale
        id raises :class:`NotFound`; a node that cannot do it
        :class:`FailedPrecondition`, saying what it can do. An act is input:
        pass the input lease's ``token`` as ``lease_token`` while leases are
        in use."""
        asked = [k for k, v in (("action", action), ("text", text), ("focus", focus or None)) if v is not None]
        if len(asked) != 1:
            raise ValueError("act_on_accessible: want exactly one of action, text or focus")
        body: JSON = {"id": node_id}
        if action is not None:
            body["action"] = action
        elif text is not None:
            body["text"] = text
        else:
            body["focus"] = True
        if lease_token:
            body["leaseToken"] = str(lease_token)
        result: JSON = self._call("POST", "/accessibility:act", body=body)
        node: Optional[JSON] = result.get("node")
        return node

    def processes(self) -> List[JSON]:
        """The programs started on the session's desktop (its autostart
        programs), running or ended: ``processId``, ``argv``, ``pid``,
        ``state``, ``exit``."""
        result: List[JSON] = self._call("GET", "/processes").get("processes", [])
        return result

    # --- history and runs ---

    def history(self, *, page_size: int = 100, types: Optional[Sequence[str]] = None) -> Iterator[JSON]:
        """Yields the session's history entries, oldest first."""
        token = ""
        while True:
            page = self._call(
                "GET", "/history", query={"pageSize": page_size, "pageToken": token, "types": list(types or [])}
            )
            yield from page.get("entries", [])
            token = page.get("nextPageToken", "")
            if not token:
                return

    def export_history(self, *, include_blobs: bool = False) -> bytes:
        """The session's whole history as JSON Lines (what ``deskgrid
        history import`` reads back)."""
        raw, _ = self._c.transport.call_raw(
            "GET",
            self._path("/history:export"),
            query={"includeBlobs": include_blobs},
            accept="application/x-ndjson",
            timeout=max(self._c.transport.timeout, 300.0),
        )
        return raw

    # --- recordings ---

    def start_recording(self, *, format: str = "mp4", fps: int = 0, width: int = 0, height: int = 0) -> JSON:
        """Starts recording the screen to a video: ``mp4`` (H.264) or
        ``webm`` (VP9), at most ``fps`` frames a second (1-30; 0 means 5),
        taken only when the screen changes, at ``width`` x ``height`` (each
        16-1920; 0 keeps the screen's). Returns the recording (``id``,
        ``state``, ...). One recording at a time per session."""
        body: JSON = {"format": "RECORDING_FORMAT_" + format.upper()}
        if fps:
            body["fps"] = fps
        if width or height:
            body["size"] = {"width": width, "height": height}
        result: JSON = self._call("POST", "/recordings", body=body).get("recording", {})
        return result

    def stop_recording(self, recording_id: str, *, wait: float = 30.0) -> JSON:
        """Ends a recording and finalises its video; returns it as the
        history keeps it, once it does (up to ``wait`` seconds), so
        :meth:`download_recording` finds it."""
        stopped: JSON = self._call("POST", f"/recordings/{_q(recording_id)}:stop", body={}).get("recording", {})
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                kept = self.recording(recording_id)
                if kept.get("state") != "RECORDING_STATE_RECORDING":
                    return kept
            except NotFound:
                pass
            time.sleep(0.1)
        return stopped

    def recordings(self) -> List[JSON]:
        """The session's recordings, newest first."""
        result: List[JSON] = self._call("GET", "/recordings").get("recordings", [])
        return result

    def recording(self, recording_id: str) -> JSON:
        """One recording: ``state``, ``frames``, ``sizeBytes``, ``downloadReady``, ..."""
        result: JSON = self._call("GET", f"/recordings/{_q(recording_id)}").get("recording", {})
        return result

    def download_recording(self, recording_id: str, *, wait: float = 60.0) -> bytes:
        """The recording's video (MP4 or WebM). A video stopped moments ago
        that the history has not stored yet is waited for up to ``wait``
        seconds."""
        deadline = time.monotonic() + wait
        while True:
            try:
                raw, _ = self._c.transport.call_raw(
                    "GET",
                    self._path(f"/recordings/{_q(recording_id)}:download"),
                    accept="video/mp4, video/webm",
                    timeout=max(self._c.transport.timeout, 300.0),
                )
                return raw
            except FailedPrecondition as e:
                if "not stored yet" not in e.message or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def run(self, prompt: str, **options: Any) -> JSON:
        """Starts an agent run on this session; see :meth:`Runs.create`."""
        return self._c.runs.create(self.id, prompt, **options)


class Files:
    """A session's files; relative paths are under its home."""

    def __init__(self, session: Session) -> None:
        self._s = session

    def read(self, path: str) -> bytes:
        """A file's content."""
        return _unb64(self._s._call("GET", "/files:read", query={"path": path}).get("content"))

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8")

    def write(self, path: str, content: Union[bytes, str], *, mode: int = 0) -> None:
        """Creates or replaces a file (mode 0 means 0644)."""
        body: JSON = {"path": path, "content": _b64(content)}
        if mode:
            body["mode"] = mode
        self._s._call("POST", "/files:write", body=body, idempotent=True)

    def list(self, path: str = "") -> List[JSON]:
        """A directory's entries: name, size, mode, isDir, modifyTime."""
        result: List[JSON] = self._s._call("GET", "/files", query={"path": path}).get("files", [])
        return result

    def stat(self, path: str) -> JSON:
        """Describes one path: name, size, mode, isDir, modifyTime."""
        result: JSON = self._s._call("GET", "/files:stat", query={"path": path})
        return result

    def delete(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, or a directory (with what it holds when ``recursive``)."""
        self._s._call("POST", "/files:delete", body={"path": path, "recursive": recursive}, idempotent=True)

    def mkdir(self, path: str, *, parents: bool = False, mode: int = 0) -> None:
        """Makes a directory (mode 0 means 0755), and its missing parents
        when ``parents`` is true."""
        body: JSON = {"path": path}
        if parents:
            body["parents"] = True
        if mode:
            body["mode"] = mode
        self._s._call("POST", "/files:mkdir", body=body, idempotent=parents)

    def move(self, source: str, destination: str, *, overwrite: bool = False) -> None:
        """Renames ``source`` to ``destination``; an existing destination is
        replaced only with ``overwrite``."""
        body: JSON = {"fromPath": source, "toPath": destination}
        if overwrite:
            body["overwrite"] = True
        self._s._call("POST", "/files:move", body=body)

    def download(self, path: str) -> Iterator[bytes]:
        """A file's content in chunks, for files too large for :meth:`read`."""
        for m in self._s._c.transport.stream("GET", self._s._path("/files:download"), query={"path": path}):
            if m.get("chunk"):
                yield _unb64(m["chunk"])


_RUN_DONE = {"RUN_STATE_SUCCEEDED", "RUN_STATE_FAILED", "RUN_STATE_CANCELLED"}


class Runs:
    """Agent runs: ``client.runs``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self,
        session_id: str,
        prompt: str,
        *,
        provider: str = "",
        model: str = "",
        max_steps: int = 0,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        options: Optional[JSON] = None,
    ) -> JSON:
        """Starts an agent loop on a session; returns the run's JSON."""
        body: JSON = {"prompt": prompt}
        if provider:
            body["provider"] = provider
        if model:
            body["model"] = model
        if max_steps:
            body["maxSteps"] = max_steps
        if api_key:
            body["apiKey"] = api_key
        if base_url:
            body["baseUrl"] = base_url
        if options:
            body["options"] = options
        result: JSON = self._c.transport.call("POST", f"/v1/sessions/{_q(session_id)}/runs", body=body)
        return result

    def get(self, run_id: str) -> JSON:
        result: JSON = self._c.transport.call("GET", f"/v1/runs/{_q(run_id)}")
        return result

    def list(self, session_id: str, *, page_size: int = 100) -> Iterator[JSON]:
        token = ""
        while True:
            page = self._c.transport.call(
                "GET", f"/v1/sessions/{_q(session_id)}/runs", query={"pageSize": page_size, "pageToken": token}
            )
            yield from page.get("runs", [])
            token = page.get("nextPageToken", "")
            if not token:
                return

    def cancel(self, run_id: str) -> JSON:
        result: JSON = self._c.transport.call("POST", f"/v1/runs/{_q(run_id)}:cancel", idempotent=True)
        return result

    def approve(self, run_id: str, **body: Any) -> JSON:
        """Approves the tool call a run waits on."""
        result: JSON = self._c.transport.call("POST", f"/v1/runs/{_q(run_id)}:approveStep", body=body)
        return result

    def reject(self, run_id: str, **body: Any) -> JSON:
        result: JSON = self._c.transport.call("POST", f"/v1/runs/{_q(run_id)}:rejectStep", body=body)
        return result

    def send_message(self, run_id: str, text: str) -> JSON:
        result: JSON = self._c.transport.call("POST", f"/v1/runs/{_q(run_id)}:sendMessage", body={"text": text})
        return result

    def events(self, run_id: str, *, after_sequence: int = 0, reconnects: int = 5) -> Iterator[JSON]:
        """Yields a run's events after ``after_sequence`` until the run ends.
        A dropped connection is resumed after the last event seen, up to
        ``reconnects`` times in a row."""
        after = after_sequence
        failures = 0
        while True:
            try:
                for m in self._c.transport.stream(
                    "GET",
                    f"/v1/runs/{_q(run_id)}/events",
                    query={"afterSequence": after or None},
                    timeout=24 * 3600.0,
                ):
                    ev = m.get("event") or {}
                    seq = int(ev.get("sequence", 0) or 0)
                    if seq and seq <= after:
                        continue
                    after = max(after, seq)
                    failures = 0
                    yield ev
                return
            except StreamError:
                failures += 1
                if failures > reconnects:
                    raise
                if self.get(run_id).get("state") in _RUN_DONE and failures > 1:
                    raise

    def entries(self, run_id: str, *, page_size: int = 100, types: Optional[Sequence[str]] = None) -> Iterator[JSON]:
        """Yields a run's history entries, oldest first."""
        token = ""
        while True:
            page = self._c.transport.call(
                "GET",
                f"/v1/runs/{_q(run_id)}/entries",
                query={"pageSize": page_size, "pageToken": token, "types": list(types or [])},
            )
            yield from page.get("entries", [])
            token = page.get("nextPageToken", "")
            if not token:
                return

    def transcript(self, run_id: str) -> JSON:
        """A run's whole transcript: ``entries`` (messages, tool calls and
        results, screenshots) in order and ``usage`` totals."""
        result: JSON = self._c.transport.call("GET", f"/v1/runs/{_q(run_id)}/transcript")
        return result

    def wait(self, run_id: str) -> JSON:
        """Follows a run until it ends and returns its final JSON."""
        for _ in self.events(run_id):
            pass
        return self.get(run_id)


class Images:
    """The OCI images sessions run: ``client.images``. Each node of a cluster
    keeps its own images: ``client.images.on_node(id)`` acts on one; without
    it a cluster's ``list`` and ``get`` ask every live node (``nodeIds`` says
    which hold each image) and the calls that change a store fail with
    FAILED_PRECONDITION. A single machine ignores the node."""

    def __init__(self, client: Client, node: str = "") -> None:
        self._c = client
        self._node = node

    def on_node(self, node_id: str) -> "Images":
        """The image API of one node of a cluster (an id of ``nodes.list()``)."""
        return Images(self._c, node_id)

    def _q(self, **q: str) -> Dict[str, str]:
        if self._node:
            q["node_id"] = self._node
        return q

    def _body(self, body: JSON) -> JSON:
        if self._node:
            body["nodeId"] = self._node
        return body

    def list(self) -> List[JSON]:
        result: List[JSON] = self._c.transport.call("GET", "/v1/images", query=self._q()).get("images", [])
        return result

    def get(self, ref: str) -> JSON:
        result: JSON = self._c.transport.call("GET", "/v1/images:get", query=self._q(ref=ref)).get("image", {})
        return result

    def delete(self, ref: str) -> None:
        self._c.transport.call("DELETE", "/v1/images", query=self._q(ref=ref))

    def pull(self, ref: str, progress: Optional[Callable[[JSON], None]] = None) -> JSON:
        """Fetches ref from its registry onto the node; ``progress`` sees each
        progress message."""
        for m in self._c.transport.stream("POST", "/v1/images:pull", body=self._body({"ref": ref}), timeout=600.0):
            if "image" in m:
                result: JSON = m["image"]
                return result
            if progress is not None and "progress" in m:
                progress(m["progress"])
        raise StreamError(f"pull {ref}: the stream ended without an image")

    def set_public(self, ref: str, public: bool = True) -> JSON:
        """Makes the caller's tag visible to every tenant, or private again."""
        result: JSON = self._c.transport.call(
            "POST", "/v1/images:setPublic", body=self._body({"ref": ref, "public": public}), idempotent=True
        ).get("image", {})
        return result

    def usage(self) -> JSON:
        """The node's image store disk use: ``images``, ``layers``,
        ``layerBytes``, ``blobBytes``, ``pinnedBytes``."""
        result: JSON = self._c.transport.call("GET", "/v1/images:usage", query=self._q())
        return result


class History:
    """History across sessions: ``client.history``."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def search(self, query: str, *, session_id: str = "", page_size: int = 100) -> Iterator[JSON]:
        """Yields the entries whose text matches ``query``."""
        token = ""
        while True:
            page = self._c.transport.call(
                "GET",
                "/v1/history:search",
                query={"query": query, "sessionId": session_id, "pageSize": page_size, "pageToken": token},
            )
            yield from page.get("entries", [])
            token = page.get("nextPageToken", "")
            if not token:
                return

    def session(self, session_id: str, *, page_size: int = 100) -> Iterator[JSON]:
        """Yields one session's entries, oldest first."""
        return Session(self._c, {"id": session_id}).history(page_size=page_size)

    def delete(self, session_id: str) -> int:
        """Deletes every history entry of a session; returns how many."""
        r = self._c.transport.call("DELETE", f"/v1/sessions/{_q(session_id)}/history")
        return int(r.get("deletedEntries", 0))

    def blob(self, sha256: str) -> Tuple[bytes, str]:
        """Stored bytes, such as a screenshot an entry refers to, by their
        SHA-256 (hex), and their content type."""
        r = self._c.transport.call("GET", f"/v1/blobs/{_q(sha256)}")
        return _unb64(r.get("data")), str(r.get("contentType", ""))

    def import_session(self, session_id: str, jsonl: Union[bytes, str], *, chunk_size: int = 256 << 10) -> JSON:
        """Stores JSON Lines as :meth:`Session.export_history` returns them
        as the history of ``session_id``, all or nothing; entries already
        stored are skipped. Returns ``imported`` and ``skipped`` counts."""
        data = jsonl.encode("utf-8") if isinstance(jsonl, str) else jsonl
        # The route takes a stream of request messages: one JSON object each.
        msgs = []
        for i in range(0, max(len(data), 1), chunk_size):
            m: JSON = {"chunk": _b64(data[i : i + chunk_size])}
            if i == 0:
                m["sessionId"] = session_id
            msgs.append(json.dumps(m))
        raw, _ = self._c.transport.call_raw(
            "POST", "/v1/history:import", body=RawBody("\n".join(msgs).encode("utf-8")), idempotent=True,
            timeout=max(self._c.transport.timeout, 300.0),
        )  # fmt: skip
        result: JSON = json.loads(raw) if raw else {}
        return result


class Nodes:
    """The nodes that run sessions: ``client.nodes``. Draining needs an
    admin key."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self) -> List[JSON]:
        """Every node: ``id``, ``address``, ``state``, ``labels``, ``capacity``, ``used``."""
        result: List[JSON] = self._c.transport.call("GET", "/v1/nodes").get("nodes", [])
        return result

    def get(self, node_id: str) -> JSON:
        """One node by id."""
        result: JSON = self._c.transport.call("GET", f"/v1/nodes/{_q(node_id)}")
        return result

    def drain(self, node_id: str) -> JSON:
        """Stops placing new sessions on a node; the sessions it runs go on."""
        result: JSON = self._c.transport.call("POST", f"/v1/nodes/{_q(node_id)}:drain", idempotent=True)
        return result

    def undrain(self, node_id: str) -> JSON:
        """Lets a drained node take new sessions again."""
        result: JSON = self._c.transport.call("POST", f"/v1/nodes/{_q(node_id)}:undrain", idempotent=True)
        return result

    def pull_image(self, ref: str, progress: Optional[Callable[[JSON], None]] = None) -> List[JSON]:
        """Pulls ref onto every live node at once; ``progress`` sees each
        node's progress message. Returns every node's result; raises when
        any node failed."""
        results: List[JSON] = []
        for m in self._c.transport.stream("POST", "/v1/nodes:pullImage", body={"ref": ref}, timeout=1800.0):
            if "result" in m:
                results.append(m["result"])
            elif progress is not None and "progress" in m:
                progress(m["progress"])
        return results
