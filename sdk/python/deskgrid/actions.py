"""Builders for the computer-use actions of ``POST /v1/sessions/{id}/actions``.

Each returns the action's JSON, to pass to :meth:`deskgrid.Session.act`::

    s.act(actions.click(100, 200), actions.type("hello"), actions.key("Return"))
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

Action = Dict[str, Any]

__all__ = [
    "Action",
    "mouse_move",
    "click",
    "double_click",
    "right_click",
    "drag",
    "button",
    "scroll",
    "key",
    "type",
    "wait",
    "zoom",
    "cursor_position",
]

_BUTTONS = {
    "left": "MOUSE_BUTTON_LEFT",
    "middle": "MOUSE_BUTTON_MIDDLE",
    "right": "MOUSE_BUTTON_RIGHT",
    "back": "MOUSE_BUTTON_BACK",
    "forward": "MOUSE_BUTTON_FORWARD",
}


def _button(name: str) -> str:
    if name.startswith("MOUSE_BUTTON_"):
        return name
    try:
        return _BUTTONS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown mouse button {name!r}: one of {', '.join(_BUTTONS)}") from None


def _point(x: int, y: int) -> Dict[str, int]:
    return {"x": int(x), "y": int(y)}


def mouse_move(x: int, y: int) -> Action:
    """Moves the pointer to (x, y)."""
    return {"mouseMove": {"to": _point(x, y)}}


def click(
    x: int, y: int, *, button: str = "left", clicks: int = 1, hold_keys: Optional[Sequence[str]] = None
) -> Action:
    """Clicks ``button`` ("left", "middle", "right", ...) ``clicks`` times at
    (x, y), holding ``hold_keys`` (such as ["shift"]) meanwhile."""
    c: Dict[str, Any] = {"at": _point(x, y), "button": _button(button), "clicks": clicks}
    if hold_keys:
        c["holdKeys"] = list(hold_keys)
    return {"click": c}


def double_click(x: int, y: int) -> Action:
    """Double-clicks the left button at (x, y)."""
    return click(x, y, clicks=2)


def right_click(x: int, y: int) -> Action:
    """Clicks the right button at (x, y)."""
    return click(x, y, button="right")


def drag(path: Iterable[Tuple[int, int]]) -> Action:
    """Presses the left button at the first point, moves through the others
    and releases at the last."""
    return {"drag": {"path": [_point(x, y) for x, y in path]}}


def button(name: str = "left", *, down: bool) -> Action:
    """Presses (down=True) or releases a mouse button where the pointer is."""
    return {"button": {"button": _button(name), "down": down}}


def scroll(
    x: int, y: int, dy: int = 0, dx: int = 0, *, hold_keys: Optional[Sequence[str]] = None
) -> Action:
    """Turns the wheel at (x, y): dy > 0 scrolls down, dx > 0 right."""
    s: Dict[str, Any] = {"at": _point(x, y), "deltaY": dy, "deltaX": dx}
    if hold_keys:
        s["holdKeys"] = list(hold_keys)
    return {"scroll": s}


def key(chord: str, *, hold: Optional[str] = None) -> Action:
    """Presses a chord such as "ctrl+shift+t" or "Return"; ``hold`` keeps it
    down for a duration such as "0.5s"."""
    k: Dict[str, Any] = {"chord": chord}
    if hold:
        k["hold"] = hold
    return {"key": k}


def type(text: str) -> Action:  # noqa: A001 - the API's name for it
    """Types text, any Unicode."""
    return {"type": {"text": text}}


def wait(seconds: float) -> Action:
    """Waits, between other actions."""
    return {"wait": {"duration": f"{seconds:g}s"}}


def zoom(x: int, y: int, width: int, height: int, *, to_width: int = 0, to_height: int = 0) -> Action:
    """Returns an image of a region of the screen, scaled to (to_width,
    to_height) when given (in the reply's ``images``)."""
    z: Dict[str, Any] = {"region": {"x": x, "y": y, "width": width, "height": height}}
    if to_width or to_height:
        z["size"] = {"width": to_width, "height": to_height}
    return {"zoom": z}


def cursor_position() -> Action:
    """Asks where the pointer is (the reply's ``cursor``)."""
    return {"cursorPosition": {}}
