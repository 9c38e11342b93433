"""Errors the deskgrid API answers, as exceptions.

Every failed call raises a :class:`DeskgridError` subclass chosen by the
gRPC code in the reply's JSON body (``{"code": 5, "message": ...}``), or by
the HTTP status when the body has none. ``status`` is the HTTP status,
``code`` the gRPC code, ``message`` the server's explanation.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Type

__all__ = [
    "DeskgridError",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
    "StreamError",
    "error_from_reply",
]


class DeskgridError(Exception):
    """A call deskgrid refused or could not complete."""

    #: The gRPC code this class stands for (2, Unknown, for the base class).
    grpc_code: int = 2

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: Optional[int] = None,
        details: Optional[List[Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        #: HTTP status of the reply (0 when the error came inside a stream).
        self.status = status
        #: gRPC status code (3 InvalidArgument, 5 NotFound, ...).
        self.code = self.grpc_code if code is None else code
        #: The status details the server sent, as JSON.
        self.details = details or []
        #: Seconds the server asked to wait before trying again, if it did.
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"HTTP {self.status}, " if self.status else ""
        return f"{self.message} ({where}{type(self).__name__}, code {self.code})"


class Cancelled(DeskgridError):
    grpc_code = 1


class Unknown(DeskgridError):
    grpc_code = 2


class InvalidArgument(DeskgridError):
    grpc_code = 3


class DeadlineExceeded(DeskgridError):
    grpc_code = 4


class NotFound(DeskgridError):
    grpc_code = 5


class AlreadyExists(DeskgridError):
    grpc_code = 6


class PermissionDenied(DeskgridError):
    grpc_code = 7


class ResourceExhausted(DeskgridError):
    grpc_code = 8


class FailedPrecondition(DeskgridError):
    grpc_code = 9


class Aborted(DeskgridError):
    grpc_code = 10


class OutOfRange(DeskgridError):
    grpc_code = 11


class Unimplemented(DeskgridError):
    grpc_code = 12


class Internal(DeskgridError):
    grpc_code = 13


class Unavailable(DeskgridError):
    grpc_code = 14


class DataLoss(DeskgridError):
    grpc_code = 15


class Unauthenticated(DeskgridError):
    grpc_code = 16


class StreamError(DeskgridError):
    """A stream ended without the message that finishes it."""

    grpc_code = 14


_BY_CODE: Dict[int, Type[DeskgridError]] = {
    c.grpc_code: c
    for c in (
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        DataLoss,
        Unauthenticated,
    )
}

# The gRPC code an HTTP status stands for when the body carries none.
_BY_STATUS = {
    400: 3,
    401: 16,
    403: 7,
    404: 5,
    409: 10,
    412: 9,
    429: 8,
    499: 1,
    500: 13,
    501: 12,
    503: 14,
    504: 4,
}


def error_from_reply(
    status: int,
    body: Any,
    retry_after: Optional[float] = None,
) -> DeskgridError:
    """The exception for an error reply: ``body`` is its parsed JSON (or text)."""
    code: Optional[int] = None
    message = ""
    details: List[Any] = []
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]  # a stream's error line, sent as the whole reply
    if isinstance(body, dict):
        if isinstance(body.get("code"), int):
            code = body["code"]
        message = str(body.get("message") or "")
        if isinstance(body.get("details"), list):
            details = body["details"]
    elif isinstance(body, str):
        message = body.strip()
    if code is None or code == 0:
        code = _BY_STATUS.get(status, 2)
    if not message:
        message = f"HTTP {status}" if status else "error"
    cls = _BY_CODE.get(code, DeskgridError)
    return cls(message, status=status, code=code, details=details, retry_after=retry_after)
