"""The HTTP transport: JSON calls, NDJSON streams, retries, timeouts.

Only the standard library (urllib): installing the SDK needs nothing else.
"""

from __future__ import annotations

import json
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import DeadlineExceeded, DeskgridError, StreamError, Unavailable, error_from_reply

Query = Mapping[str, Union[str, int, bool, Sequence[str], None]]

#: Default seconds one call may take (streams: seconds one read may wait).
DEFAULT_TIMEOUT = 60.0


class RawBody:
    """A request body sent as it is, not encoded as one JSON value (such as
    the newline-delimited messages of a client-streaming route)."""

    def __init__(self, data: bytes, content_type: str = "application/json") -> None:
        self.data = data
        self.content_type = content_type


def _retry_after(headers: Any) -> Optional[float]:
    if headers is None:
        return None
    for name in ("Retry-After", "Grpc-Metadata-Retry-After"):
        v = headers.get(name)
        if v:
            try:
                return max(0.0, float(v))
            except ValueError:
                return None
    return None


def _parse_body(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")


class Transport:
    """Sends requests to one deskgrid gateway with one API key."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = 4,
        max_retry_wait: float = 30.0,
        on_retry: Optional[Callable[[int, DeskgridError, float], None]] = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            base_url = "http://" + base_url
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retries = max(1, retries)
        self.max_retry_wait = max_retry_wait
        self.on_retry = on_retry
        # No proxies: a deskgrid is usually on loopback or a private network,
        # and http_proxy set for the internet must not catch it.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def url(self, path: str, query: Optional[Query] = None) -> str:
        u = self.base_url + path
        if query:
            pairs: List[Tuple[str, str]] = []
            for k, v in query.items():
                if v is None or v == "" or v is False:
                    continue
                if isinstance(v, (list, tuple)):
                    pairs.extend((k, str(x)) for x in v)
                elif v is True:
                    pairs.append((k, "true"))
                else:
                    pairs.append((k, str(v)))
            if pairs:
                u += "?" + urllib.parse.urlencode(pairs)
        return u

    def _open(
        self,
        method: str,
        path: str,
        query: Optional[Query],
        body: Any,
        timeout: Optional[float],
        accept: str,
    ) -> Any:
        data = None
        headers: Dict[str, str] = {"Accept": accept, "User-Agent": "deskgrid-python/0.1"}
        if isinstance(body, RawBody):
            data = body.data
            headers["Content-Type"] = body.content_type
        elif body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        elif method in ("POST", "PUT", "PATCH"):
            data = b"{}"
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        req = urllib.request.Request(self.url(path, query), data=data, headers=headers, method=method)
        try:
            return self._opener.open(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            raise error_from_reply(e.code, _parse_body(raw), _retry_after(e.headers)) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, (socket.timeout, TimeoutError)):
                raise DeadlineExceeded(f"{method} {path}: no answer in {timeout}s") from e
            raise Unavailable(f"{method} {path}: {e.reason}") from e
        except (socket.timeout, TimeoutError) as e:
            raise DeadlineExceeded(f"{method} {path}: no answer in {timeout}s") from e
        except ConnectionError as e:
            raise Unavailable(f"{method} {path}: {e}") from e

    def _with_retries(self, idempotent: bool, call: Callable[[], Any]) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except DeskgridError as e:
                # 429 means the call was refused before it did anything, so
                # any call may be repeated; other failures only when repeating
                # it is safe.
                again = e.status == 429 or (idempotent and e.code == 14 and e.status in (0, 502, 503, 504))
                if not again or attempt >= self.retries:
                    raise
                wait = min(0.1 * 2 ** (attempt - 1), 2.0) * (0.5 + random.random())
                if e.retry_after is not None:
                    wait = e.retry_after
                wait = min(wait, self.max_retry_wait)
                if self.on_retry is not None:
                    self.on_retry(attempt, e, wait)
                time.sleep(wait)

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Query] = None,
        body: Any = None,
        idempotent: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """Sends one request and returns its parsed JSON reply."""
        raw, _ = self.call_raw(method, path, query=query, body=body, idempotent=idempotent, timeout=timeout)
        return json.loads(raw.decode("utf-8")) if raw else {}

    def call_raw(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Query] = None,
        body: Any = None,
        idempotent: Optional[bool] = None,
        timeout: Optional[float] = None,
        accept: str = "application/json",
    ) -> Tuple[bytes, str]:
        """Sends one request and returns the reply's bytes and content type."""
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "DELETE", "PUT")
        t = self.timeout if timeout is None else timeout

        def once() -> Tuple[bytes, str]:
            resp = self._open(method, path, query, body, t, accept)
            with resp:
                try:
                    return resp.read(), resp.headers.get("Content-Type", "")
                except (socket.timeout, TimeoutError) as e:
                    raise DeadlineExceeded(f"{method} {path}: no answer in {t}s") from e
                except ConnectionError as e:
                    raise Unavailable(f"{method} {path}: {e}") from e

        result: Tuple[bytes, str] = self._with_retries(idempotent, once)
        return result

    def stream(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Query] = None,
        body: Any = None,
        idempotent: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> Iterator[Dict[str, Any]]:
        """Yields the ``result`` of each line of a newline-delimited JSON
        stream; an ``error`` line raises its exception. ``timeout`` bounds
        each wait for the next line (None: the client's timeout)."""
        if idempotent is None:
            idempotent = method == "GET"
        t = self.timeout if timeout is None else timeout
        resp = self._with_retries(
            idempotent, lambda: self._open(method, path, query, body, t, "application/x-ndjson")
        )
        with resp:
            while True:
                try:
                    line = resp.readline()
                except (ConnectionError, socket.timeout, TimeoutError, OSError) as e:
                    raise StreamError(f"{method} {path}: stream broken: {e}") from e
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                try:
                    msg = json.loads(line.decode("utf-8"))
                except ValueError as e:
                    raise StreamError(f"{method} {path}: not JSON: {line[:200]!r}") from e
                if isinstance(msg, dict) and msg.get("error"):
                    err = msg["error"]
                    raise error_from_reply(0, err if isinstance(err, dict) else {"message": str(err)})
                if isinstance(msg, dict) and "result" in msg:
                    yield msg["result"] or {}
                else:
                    yield msg
