"""The asyncio client: the same calls as :class:`deskgrid.Client`, awaited.

    from deskgrid.aio import AsyncClient

    async with AsyncClient() as dg, await dg.sessions.create(width=1024, height=768) as s:
        await s.click(100, 200)
        png = await s.screenshot()

Each call runs the standard-library client in a worker thread
(``asyncio.to_thread``), so the event loop never blocks and the SDK still
needs no package beyond the standard library. Streams (``watch``, run
events, ``list``) are async iterators; cancelling one while it waits for the
server stops at the next message or when its timeout passes.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union, cast

from . import actions as A
from .client import Client, ExecResult, Images, Session, ShellResult
from .errors import NotFound

__all__ = ["AsyncClient", "AsyncSession", "AsyncSessions", "AsyncRuns", "AsyncImages", "AsyncHistory", "AsyncNodes"]

T = TypeVar("T")
JSON = Dict[str, Any]

_DONE = object()


async def _aiter(make: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    it = await asyncio.to_thread(lambda: iter(make()))

    def step() -> object:
        return next(it, _DONE)

    while True:
        v = await asyncio.to_thread(step)
        if v is _DONE:
            return
        yield cast(T, v)


class AsyncClient:
    """A deskgrid deployment; arguments as for :class:`deskgrid.Client`."""

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, **kw: Any) -> None:
        #: The synchronous client the calls run on.
        self.sync = Client(base_url, api_key, **kw)
        self.sessions = AsyncSessions(self.sync)
        self.runs = AsyncRuns(self.sync)
        self.images = AsyncImages(self.sync)
        self.history = AsyncHistory(self.sync)
        self.nodes = AsyncNodes(self.sync)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.sync.close()

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        """Any route of the API: ``await dg.call("GET", "/v1/images")``."""
        return await asyncio.to_thread(self.sync.transport.call, method, path, **kw)


class AsyncSessions:
    def __init__(self, c: Client) -> None:
        self._c = c

    async def create(self, **options: Any) -> "AsyncSession":
        """As :meth:`deskgrid.Sessions.create`."""
        return AsyncSession(await asyncio.to_thread(lambda: self._c.sessions.create(**options)))

    async def get(self, session_id: str) -> "AsyncSession":
        return AsyncSession(await asyncio.to_thread(self._c.sessions.get, session_id))

    async def list(
        self, *, states: Optional[Sequence[str]] = None, labels: Optional[Mapping[str, str]] = None, page_size: int = 100
    ) -> AsyncIterator["AsyncSession"]:
        async for s in _aiter(lambda: self._c.sessions.list(states=states, labels=labels, page_size=page_size)):
            yield AsyncSession(s)

    async def delete(self, session_id: str) -> None:
        await asyncio.to_thread(self._c.sessions.delete, session_id)


class AsyncSession:
    """One desktop; ``async with`` deletes it. ``sync`` is the blocking twin."""

    def __init__(self, s: Session) -> None:
        self.sync = s

    def __repr__(self) -> str:
        return f"<deskgrid.aio.AsyncSession {self.id} {self.state}>"

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def state(self) -> str:
        return self.sync.state

    @property
    def data(self) -> JSON:
        return self.sync.data

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        try:
            await self.delete()
        except NotFound:
            pass

    async def refresh(self) -> "AsyncSession":
        await asyncio.to_thread(self.sync.refresh)
        return self

    async def delete(self) -> None:
        await asyncio.to_thread(self.sync.delete)

    async def keepalive(self) -> None:
        await asyncio.to_thread(self.sync.keepalive)

    async def suspend(self, mode: Optional[str] = None) -> None:
        await asyncio.to_thread(self.sync.suspend, mode)

    async def resume(self) -> None:
        await asyncio.to_thread(self.sync.resume)

    def watch(self, *, timeout: Optional[float] = None) -> AsyncIterator[JSON]:
        return _aiter(lambda: self.sync.watch(timeout=timeout))

    async def screenshot(self, **options: Any) -> bytes:
        return await asyncio.to_thread(lambda: self.sync.screenshot(**options))

    async def act(self, *actions: A.Action, **options: Any) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.act(*actions, **options))

    async def click(self, x: int, y: int, *, button: str = "left", clicks: int = 1) -> None:
        await self.act(A.click(x, y, button=button, clicks=clicks))

    async def move_mouse(self, x: int, y: int) -> None:
        await self.act(A.mouse_move(x, y))

    async def drag(self, *path: Tuple[int, int]) -> None:
        await self.act(A.drag(path))

    async def scroll(self, x: int, y: int, dy: int = 0, dx: int = 0) -> None:
        await self.act(A.scroll(x, y, dy, dx))

    async def key(self, chord: str) -> None:
        await self.act(A.key(chord))

    async def type(self, text: str) -> None:
        await self.act(A.type(text))

    async def cursor_position(self) -> Tuple[int, int]:
        return await asyncio.to_thread(self.sync.cursor_position)

    async def exec(self, *argv: str, **options: Any) -> ExecResult:
        return await asyncio.to_thread(lambda: self.sync.exec(*argv, **options))

    def exec_stream(self, *argv: str, **options: Any) -> AsyncIterator[Tuple[str, Union[bytes, JSON]]]:
        return _aiter(lambda: self.sync.exec_stream(*argv, **options))

    async def shell(self, command: str, *, timeout: Optional[float] = None, as_root: bool = False) -> ShellResult:
        return await asyncio.to_thread(lambda: self.sync.shell(command, timeout=timeout, as_root=as_root))

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self.sync.files.read, path)

    async def write_file(self, path: str, content: Union[bytes, str], *, mode: int = 0) -> None:
        await asyncio.to_thread(self.sync.files.write, path, content, mode=mode)

    async def list_files(self, path: str = "") -> List[JSON]:
        return await asyncio.to_thread(self.sync.files.list, path)

    async def run(self, prompt: str, **options: Any) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.run(prompt, **options))

    async def commit(self, image: str) -> JSON:
        return await asyncio.to_thread(self.sync.commit, image)

    async def display(self) -> JSON:
        return await asyncio.to_thread(self.sync.display)

    async def resize(self, width: int, height: int) -> JSON:
        return await asyncio.to_thread(self.sync.resize, width, height)

    async def clipboard(self, *, primary: bool = False) -> str:
        return await asyncio.to_thread(lambda: self.sync.clipboard(primary=primary))

    async def set_clipboard(self, text: str, *, primary: bool = False, lease_token: Optional[int] = None) -> None:
        await asyncio.to_thread(lambda: self.sync.set_clipboard(text, primary=primary, lease_token=lease_token))

    async def applications(self) -> List[JSON]:
        return await asyncio.to_thread(self.sync.applications)

    async def launch(self, application: str, *args: str, lease_token: Optional[int] = None) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.launch(application, *args, lease_token=lease_token))

    async def open(self, target: str, *, lease_token: Optional[int] = None) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.open(target, lease_token=lease_token))

    async def accessibility_tree(
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
        return await asyncio.to_thread(
            lambda: self.sync.accessibility_tree(
                max_depth=max_depth,
                max_nodes=max_nodes,
                only_visible=only_visible,
                application=application,
                root=root,
                window_id=window_id,
                focused_window=focused_window,
                pid=pid,
                osworld_xml=osworld_xml,
            )
        )

    async def act_on_accessible(
        self,
        node_id: str,
        *,
        action: Optional[str] = None,
        text: Optional[str] = None,
        focus: bool = False,
        lease_token: Optional[int] = None,
    ) -> Optional[JSON]:
        return await asyncio.to_thread(
            lambda: self.sync.act_on_accessible(
                node_id, action=action, text=text, focus=focus, lease_token=lease_token
            )
        )

    async def windows(self) -> List[JSON]:
        return await asyncio.to_thread(self.sync.windows)

    async def activate_window(self, window_id: int, *, lease_token: Optional[int] = None) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.activate_window(window_id, lease_token=lease_token))

    async def close_window(self, window_id: int, *, force: bool = False, lease_token: Optional[int] = None) -> bool:
        return await asyncio.to_thread(lambda: self.sync.close_window(window_id, force=force, lease_token=lease_token))

    async def move_window(
        self, window_id: int, x: int, y: int, width: int = 0, height: int = 0, *, lease_token: Optional[int] = None
    ) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.move_window(window_id, x, y, width, height, lease_token=lease_token))

    async def set_window_state(self, window_id: int, state: str, *, lease_token: Optional[int] = None) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.set_window_state(window_id, state, lease_token=lease_token))

    async def acquire_input_lease(self, holder: str, *, ttl: Optional[float] = None, wait: Optional[float] = None) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.acquire_input_lease(holder, ttl=ttl, wait=wait))

    async def input_lease(self) -> JSON:
        return await asyncio.to_thread(self.sync.input_lease)

    async def renew_input_lease(self, lease: Mapping[str, Any], *, ttl: Optional[float] = None) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.renew_input_lease(lease, ttl=ttl))

    async def release_input_lease(self, lease: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self.sync.release_input_lease, lease)

    async def sandbox(self) -> JSON:
        return await asyncio.to_thread(self.sync.sandbox)

    async def processes(self) -> List[JSON]:
        return await asyncio.to_thread(self.sync.processes)

    async def changes(self, path: str = "") -> List[JSON]:
        return await asyncio.to_thread(self.sync.changes, path)

    async def diff(self, path: str) -> JSON:
        return await asyncio.to_thread(self.sync.diff, path)

    async def apply_changes(self, paths: Optional[Sequence[str]] = None) -> JSON:
        return await asyncio.to_thread(self.sync.apply_changes, paths)

    async def discard_changes(self, paths: Optional[Sequence[str]] = None) -> List[str]:
        return await asyncio.to_thread(self.sync.discard_changes, paths)

    async def create_snapshot(self) -> JSON:
        return await asyncio.to_thread(self.sync.create_snapshot)

    async def snapshots(self) -> List[JSON]:
        return await asyncio.to_thread(self.sync.snapshots)

    async def restore_snapshot(self, snapshot_id: str) -> JSON:
        return await asyncio.to_thread(self.sync.restore_snapshot, snapshot_id)

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await asyncio.to_thread(self.sync.delete_snapshot, snapshot_id)

    async def restart_shell(self) -> None:
        await asyncio.to_thread(self.sync.restart_shell)

    def history(self, *, page_size: int = 100, types: Optional[Sequence[str]] = None) -> AsyncIterator[JSON]:
        return _aiter(lambda: self.sync.history(page_size=page_size, types=types))

    async def export_history(self, *, include_blobs: bool = False) -> bytes:
        return await asyncio.to_thread(lambda: self.sync.export_history(include_blobs=include_blobs))

    async def start_recording(self, *, format: str = "mp4", fps: int = 0, width: int = 0, height: int = 0) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.start_recording(format=format, fps=fps, width=width, height=height))

    async def stop_recording(self, recording_id: str, *, wait: float = 30.0) -> JSON:
        return await asyncio.to_thread(lambda: self.sync.stop_recording(recording_id, wait=wait))

    async def recordings(self) -> List[JSON]:
        return await asyncio.to_thread(self.sync.recordings)

    async def recording(self, recording_id: str) -> JSON:
        return await asyncio.to_thread(self.sync.recording, recording_id)

    async def download_recording(self, recording_id: str, *, wait: float = 60.0) -> bytes:
        return await asyncio.to_thread(lambda: self.sync.download_recording(recording_id, wait=wait))


class AsyncRuns:
    def __init__(self, c: Client) -> None:
        self._c = c

    async def create(self, session_id: str, prompt: str, **options: Any) -> JSON:
        return await asyncio.to_thread(lambda: self._c.runs.create(session_id, prompt, **options))

    async def get(self, run_id: str) -> JSON:
        return await asyncio.to_thread(self._c.runs.get, run_id)

    async def cancel(self, run_id: str) -> JSON:
        return await asyncio.to_thread(self._c.runs.cancel, run_id)

    def events(self, run_id: str, *, after_sequence: int = 0) -> AsyncIterator[JSON]:
        return _aiter(lambda: self._c.runs.events(run_id, after_sequence=after_sequence))

    def list(self, session_id: str, *, page_size: int = 100) -> AsyncIterator[JSON]:
        return _aiter(lambda: self._c.runs.list(session_id, page_size=page_size))

    async def send_message(self, run_id: str, text: str) -> JSON:
        return await asyncio.to_thread(self._c.runs.send_message, run_id, text)

    async def approve(self, run_id: str, **body: Any) -> JSON:
        return await asyncio.to_thread(lambda: self._c.runs.approve(run_id, **body))

    async def reject(self, run_id: str, **body: Any) -> JSON:
        return await asyncio.to_thread(lambda: self._c.runs.reject(run_id, **body))

    def entries(self, run_id: str, *, page_size: int = 100, types: Optional[Sequence[str]] = None) -> AsyncIterator[JSON]:
        return _aiter(lambda: self._c.runs.entries(run_id, page_size=page_size, types=types))

    async def transcript(self, run_id: str) -> JSON:
        return await asyncio.to_thread(self._c.runs.transcript, run_id)

    async def wait(self, run_id: str) -> JSON:
        return await asyncio.to_thread(self._c.runs.wait, run_id)


class AsyncImages:
    """As :class:`deskgrid.Images`, awaited."""

    def __init__(self, c: Client, images: Optional[Images] = None) -> None:
        self._c = c
        self._i = images if images is not None else c.images

    def on_node(self, node_id: str) -> "AsyncImages":
        return AsyncImages(self._c, self._i.on_node(node_id))

    async def list(self) -> List[JSON]:
        return await asyncio.to_thread(self._i.list)

    async def get(self, ref: str) -> JSON:
        return await asyncio.to_thread(self._i.get, ref)

    async def delete(self, ref: str) -> None:
        await asyncio.to_thread(self._i.delete, ref)

    async def pull(self, ref: str, progress: Optional[Callable[[JSON], None]] = None) -> JSON:
        return await asyncio.to_thread(self._i.pull, ref, progress)

    async def set_public(self, ref: str, public: bool = True) -> JSON:
        return await asyncio.to_thread(self._i.set_public, ref, public)

    async def usage(self) -> JSON:
        return await asyncio.to_thread(self._i.usage)


class AsyncHistory:
    """As :class:`deskgrid.History`, awaited."""

    def __init__(self, c: Client) -> None:
        self._c = c

    def search(self, query: str, *, session_id: str = "", page_size: int = 100) -> AsyncIterator[JSON]:
        return _aiter(lambda: self._c.history.search(query, session_id=session_id, page_size=page_size))

    async def import_session(self, session_id: str, jsonl: Union[bytes, str]) -> JSON:
        return await asyncio.to_thread(self._c.history.import_session, session_id, jsonl)

    async def delete(self, session_id: str) -> int:
        return await asyncio.to_thread(self._c.history.delete, session_id)

    async def blob(self, sha256: str) -> Tuple[bytes, str]:
        return await asyncio.to_thread(self._c.history.blob, sha256)


class AsyncNodes:
    """As :class:`deskgrid.Nodes`, awaited."""

    def __init__(self, c: Client) -> None:
        self._c = c

    async def list(self) -> List[JSON]:
        return await asyncio.to_thread(self._c.nodes.list)

    async def get(self, node_id: str) -> JSON:
        return await asyncio.to_thread(self._c.nodes.get, node_id)

    async def drain(self, node_id: str) -> JSON:
        return await asyncio.to_thread(self._c.nodes.drain, node_id)

    async def undrain(self, node_id: str) -> JSON:
        return await asyncio.to_thread(self._c.nodes.undrain, node_id)

    async def pull_image(self, ref: str, progress: Optional[Callable[[JSON], None]] = None) -> List[JSON]:
        return await asyncio.to_thread(self._c.nodes.pull_image, ref, progress)
