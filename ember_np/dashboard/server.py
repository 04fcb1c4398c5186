"""The dashboard's HTTP server: one page and a small JSON API over a runs root.

Routes (GET and HEAD; any other method gets 405 with ``Allow: GET, HEAD``;
any other path 404)::

    /                  the page (index.html), with /app.js and /style.css
    /api/runs          {"root", "now", "runs": [summary, ...]}, newest run first
    /api/series?run=ID[&cursor=C]
                       one page of a run's training and evaluation series
                       (404: no such run)

A run summary has ``id`` (``name/version/run_id``), ``name``, ``version``,
``run_id``, ``seeds`` (None for a single run), ``total_steps``, ``episodes``,
``last_update`` (Unix time), ``training`` and ``best_eval``. A series page has
one member per seed with its ``train`` columns (``steps``, ``reward``,
``length``, ``epsilon``, ``loss``) and ``eval`` columns (``steps``,
``reward``: mean greedy reward per evaluation, ``episodes``), each with
``from``, the row index where these rows go (the client drops its rows from
there on and appends these); ``cursor``, an opaque string to pass back for
the next page, which then holds only rows read after it; ``more``: whether
rows are left (ask again at once); ``multi_seed``; and for a multi-seed run's
last page ``iqm``: ``train`` and ``eval`` curves with ``iqm``, ``lo``, ``hi``
(95% bootstrap band over seeds). A page holds at most
:data:`ember_np.dashboard.tails.PAGE_BYTES` of each log. Missing values are
``null``; every number is finite.

Every request whose ``Host`` header does not name this server gets 403, so a
page on another site cannot read the API through DNS rebinding (its requests
carry that site's name). Allowed: ``localhost``, the bound address
(``127.0.0.1``, ``[::1]``; for ``0.0.0.0`` or ``::`` also both loopback
addresses) and the names given as ``allow_hosts`` (``--allow-host``), with any
port or none: a rebinding page chooses the port, never the name, and a
tunnel (``ssh -L 8080:localhost:6006``) sends its own port.

The standard library's ``ThreadingHTTPServer`` is enough here: a page, two
JSON routes, one user; no dependency to install or keep up to date.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import sys
import time
import traceback
from collections.abc import Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from ember_np.dashboard.logs import RunStore

__all__ = ["make_server", "serve", "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6006

# The only files served: the request path is looked up here, never joined to a directory.
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}


_LABEL = r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
_PORT = re.compile(r"^:[0-9]{1,5}$")


def _host_name(value: str) -> str | None:
    """The name in a Host header, lower case, without port or trailing dot (None: malformed).

    ``"LocalHost.:8080"`` -> ``"localhost"``; ``"[::1]:6006"`` -> ``"[::1]"``.
    """
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        name, rest = value[: end + 1], value[end + 1 :]
        if end < 0:
            return None
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    if rest and not _PORT.match(rest):
        return None
    return name.removesuffix(".") or None


def _normal_host(name: str) -> str | None:
    """``name`` as it appears in a Host header (IPv6 in brackets), or None when not a host name."""
    name = name.strip().lower().removesuffix(".")
    try:
        ip = ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
    except ValueError:
        return name if _HOSTNAME.match(name) else None
    return f"[{ip.compressed}]" if ip.version == 6 else ip.compressed


def _static(name: str) -> bytes:
    return (resources.files("ember_np.dashboard") / "static" / name).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.server.verbose:  # one line per request only when asked; errors always
            super().log_request(code, size)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, payload: Any, status: int = HTTPStatus.OK) -> None:
        body = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode()
        self._send(status, body, "application/json")

    def _not_found(self, what: str) -> None:
        self._json({"error": f"not found: {what}"}, HTTPStatus.NOT_FOUND)

    def _host_allowed(self) -> bool:
        host = self.headers.get("Host")
        name = None if host is None else _host_name(host)
        if name is not None and name.startswith("["):
            name = _normal_host(name)  # "[0:0::1]" is "[::1]"
        return name is not None and name in self.server.allowed_hosts

    def _refuse_host(self) -> None:
        host = self.headers.get("Host")
        self.close_connection = True
        self._json({"error": f"Host {host!r} is not this dashboard's address; to reach it "
                    "under another name, start it with --allow-host NAME"},
                   HTTPStatus.FORBIDDEN)  # fmt: skip

    def _not_allowed(self) -> None:
        """Any method but GET and HEAD: 405 (the connection closes: a body may follow)."""
        self.close_connection = True
        if not self._host_allowed():
            self._refuse_host()
            return
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        body = json.dumps({"error": f"method {self.command} not allowed: GET or HEAD only"})
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body.encode())

    def __getattr__(self, name: str) -> Any:
        # http.server answers 501 for a method without a do_<METHOD>; every one
        # but GET and HEAD is answered here instead.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def do_GET(self) -> None:  # noqa: N802
        try:
            if not self._host_allowed():
                self._refuse_host()
                return
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page went away mid-answer
        except Exception as exc:  # a bug: say so, keep serving
            self.log_error("%s", traceback.format_exc())
            self._json({"error": f"internal error: {exc!r}"}, HTTPStatus.INTERNAL_SERVER_ERROR)

    def _route(self) -> None:
        url = urlsplit(self.path)
        store = self.server.store
        if url.path in _STATIC:
            name, content_type = _STATIC[url.path]
            self._send(HTTPStatus.OK, _static(name), content_type)
        elif url.path == "/api/runs":
            self._json({"root": str(store.root), "now": time.time(), "runs": store.list_runs()})
        elif url.path == "/api/series":
            query = parse_qs(url.query)
            run = query.get("run", [""])[0]
            series = store.series(run, query.get("cursor", [None])[0])
            if series is None:
                self._not_found(f"run {run!r} under the runs root")
            else:
                self._json(series)
        else:
            self._not_found(url.path)

    do_HEAD = do_GET  # noqa: N815


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None  # a name, e.g. localhost: resolved as IPv4, as before


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # listen() backlog: socketserver's 5 drops the connections of a burst (500 at
    # once), whose clients then wait out TCP's retransmission backoff (1, 3, 7... s).
    request_queue_size = 1024

    def __init__(
        self, address: tuple[str, int], store: RunStore, verbose: bool, allow_hosts: Iterable[str]
    ) -> None:
        self.store = store
        self.verbose = verbose
        host, port = address
        ip = _ip(host)
        if ip is not None and ip.version == 6:  # socketserver's default is AF_INET
            self.address_family = socket.AF_INET6
            host = ip.compressed
        super().__init__((host, port), _Handler)
        bound = ipaddress.ip_address(cast(str, self.server_address[0]))  # AF_INET(6): a str
        self.allowed_hosts = {"localhost", _normal_host(str(bound))}
        if bound.is_unspecified:  # 0.0.0.0 or ::: reachable through either loopback
            self.allowed_hosts |= {"127.0.0.1", "[::1]"}
        self.allowed_hosts |= set(allow_hosts)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{_normal_host(cast(str, host))}:{port}/"  # AF_INET(6): a str


def make_server(
    root: str | os.PathLike[str],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    verbose: bool = False,
    allow_hosts: Iterable[str] = (),
) -> _Server:
    """A dashboard server over ``root``, bound but not yet serving.

    ``host`` is an IPv4 or IPv6 address or a name (names resolve as IPv4).
    ``port=0`` picks a free port; the server's ``url`` says which. Requests
    whose Host header names neither localhost, the bound address nor one of
    ``allow_hosts`` (host names or addresses, without port) get 403. Call
    ``serve_forever()`` (in a thread, for tests) and ``shutdown()``.

    Raises
    ------
    ValueError
        An ``allow_hosts`` entry is not a host name or address.
    FileNotFoundError
        ``root`` is not a directory.
    OSError
        The address cannot be bound (e.g. the port is in use).
    """
    names = set()
    for name in allow_hosts:
        normal = _normal_host(name)
        if normal is None:
            raise ValueError(
                f"allow_hosts (--allow-host) takes a host name or address without scheme, "
                f"port or path, such as dash.example or 192.168.1.5; got {name!r}"
            )
        names.add(normal)
    return _Server((host, port), RunStore(root), verbose, names)


def serve(
    root: str | os.PathLike[str],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    allow_hosts: Iterable[str] = (),
) -> None:
    """Serve the dashboard until interrupted, after printing one line with its address."""
    server = make_server(root, host, port, allow_hosts=allow_hosts)
    print(f"ember-np dashboard: {server.url} (runs root {server.store.root}; Ctrl-C stops it)")
    ip = _ip(host)
    if host != "localhost" and (ip is None or not ip.is_loopback):
        print(f"note: listening on {host}, reachable from other machines; requests must name "
              "localhost, that address or an --allow-host name", file=sys.stderr)  # fmt: skip
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
