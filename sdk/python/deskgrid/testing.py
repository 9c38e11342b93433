"""A real deskgrid for tests: ``deskgrid up`` on free loopback ports with its
own data and runtime directories, stopped (as with Ctrl-C) at the end.

    from deskgrid.testing import DeskgridServer

    with DeskgridServer() as srv:
        dg = srv.client()
        ...

Its sessions run on the machine's own programs unless the flags name a
default image (``["-default-image", "deskgrid/desktop:latest"]``): importing
the desktop image into every server's fresh data directory would cost each
a gigabyte and most of a minute.

The binary is ``$DESKGRID_BIN``, else ``deskgrid`` on PATH. With pytest,
``from deskgrid.testing import deskgrid_server`` in a conftest.py gives a
session-wide fixture of the same.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from types import TracebackType
from typing import Any, Callable, Iterator, List, Optional, Sequence, Type

from .client import Client

__all__ = ["DeskgridServer", "deskgrid_server", "free_addr"]


def free_addr() -> str:
    """A loopback address with a port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        host, port = s.getsockname()
        return f"{host}:{port}"


class DeskgridServer:
    """``deskgrid up`` for the length of a test (or a ``with`` block)."""

    def __init__(self, flags: Sequence[str] = (), *, binary: Optional[str] = None, ready_timeout: float = 60.0) -> None:
        self.binary = binary or os.environ.get("DESKGRID_BIN") or shutil.which("deskgrid") or ""
        if not self.binary:
            raise RuntimeError("no deskgrid binary: set DESKGRID_BIN or put deskgrid on PATH")
        self.flags = list(flags)
        self.ready_timeout = ready_timeout
        self.http_addr = ""
        self.grpc_addr = ""
        self.api_key = ""
        self.data_dir = ""
        self.run_dir = ""
        self._tmp: Optional[tempfile.TemporaryDirectory[str]] = None
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._log: Any = None

    @property
    def url(self) -> str:
        """The REST base URL."""
        return "http://" + self.http_addr

    def client(self, **kw: Any) -> Client:
        """A client of this deskgrid with its admin key."""
        return Client(self.url, self.api_key, **kw)

    def logs(self) -> str:
        """What deskgrid has printed so far."""
        if not self._tmp:
            return ""
        with open(os.path.join(self._tmp.name, "deskgrid.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def start(self) -> "DeskgridServer":
        self._tmp = tempfile.TemporaryDirectory(prefix="deskgrid-test-")
        self.data_dir = os.path.join(self._tmp.name, "data")
        self.run_dir = os.path.join(self._tmp.name, "run")
        os.mkdir(self.data_dir)
        os.mkdir(self.run_dir)
        self.http_addr, self.grpc_addr = free_addr(), free_addr()
        args: List[str] = [
            self.binary, "up",
            "-http-addr", self.http_addr, "-grpc-addr", self.grpc_addr,
            "-data-dir", self.data_dir, "-runtime-dir", self.run_dir,
            "-default-image", "",
            *self.flags,
        ]  # fmt: skip
        self._log = open(os.path.join(self._tmp.name, "deskgrid.log"), "wb")
        self._proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self._proc.poll() is not None:
                logs = self.logs()
                self.stop()
                raise RuntimeError(f"deskgrid up exited before it was ready:\n{logs}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=5) as r:
                    if r.status == 200:
                        key_file = os.path.join(self.data_dir, "admin.key")
                        if os.path.exists(key_file):
                            with open(key_file) as f:
                                self.api_key = f.read().strip()
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                logs = self.logs()
                self.stop()
                raise RuntimeError(f"deskgrid up not ready in {self.ready_timeout}s:\n{logs}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Interrupts deskgrid as Ctrl-C would, waits for it, and removes its directories."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "DeskgridServer":
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()


def _serve() -> Iterator[DeskgridServer]:
    with DeskgridServer() as srv:
        yield srv


def _pytest_fixture() -> Any:
    try:
        pytest = importlib.import_module("pytest")
    except ImportError:
        return None
    fixture: Callable[[Callable[[], Iterator[DeskgridServer]]], Any] = pytest.fixture(scope="session", name="deskgrid_server")
    return fixture(_serve)


#: With pytest: a deskgrid shared by the test session (None without pytest).
deskgrid_server = _pytest_fixture()
