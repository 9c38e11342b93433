"""deskgrid: isolated Linux desktops for computer-use agents, from Python.

    import deskgrid

    with deskgrid.Client() as dg, dg.sessions.create(width=1024, height=768) as s:
        png = s.screenshot()
        s.click(100, 200)
        s.type("hello")
        print(s.exec("echo", "hi").stdout)

The client speaks the REST/JSON API of a deskgrid gateway
(``$DESKGRID_URL``, default http://127.0.0.1:8080) with the key in
``$DESKGRID_API_KEY``, using only the standard library.
"""

from . import actions, aio
from .client import Client, ExecResult, Files, History, Images, Nodes, Runs, Session, Sessions, ShellResult
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors

__version__ = "0.1.0"

__all__ = [
    "actions",
    "aio",
    "Client",
    "ExecResult",
    "Files",
    "History",
    "Images",
    "Nodes",
    "Runs",
    "Session",
    "Sessions",
    "ShellResult",
    *_errors,
]
