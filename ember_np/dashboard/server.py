"""The dashboard's HTTP server: one page and a small JSON API over a runs root.

Routes (GET only; anything else is 404)::

    /                  the page (index.html), with /app.js and /style.css
    /api/runs          {"root", "now", "runs": [summary, ...]}, newest run first
    /api/series?run=ID one run's training and evaluation series (404: no such run)

A run summary has ``id`` (``name/version/run_id``), ``name``, ``version``,
``run_id``, ``seeds`` (None for a single run), ``total_steps``, ``episodes``,
``last_update`` (Unix time), ``training`` and ``best_eval``. A series has one
member per seed with its ``train`` columns (``steps``, ``reward``,
``length``, ``epsilon``, ``loss``) and ``eval`` columns (``steps``,
``reward``: mean greedy reward per evaluation, ``episodes``), and for a
multi-seed run ``iqm``: ``train`` and ``eval`` curves with ``iqm``, ``lo``,
``hi`` (95% bootstrap band over seeds). Missing values are ``null``.

The standard library's ``ThreadingHTTPServer`` is enough here: a page, two
JSON routes, one user; no dependency to install or keep up to date.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
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

    def do_GET(self) -> None:  # noqa: N802
        try:
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
            run = parse_qs(url.query).get("run", [""])[0]
            series = store.series(run)
            if series is None:
                self._not_found(f"run {run!r} under the runs root")
            else:
                self._json(series)
        else:
            self._not_found(url.path)

    do_HEAD = do_GET  # noqa: N815


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: RunStore, verbose: bool) -> None:
        self.store = store
        self.verbose = verbose
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def make_server(
    root: str | os.PathLike[str],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    verbose: bool = False,
) -> _Server:
    """A dashboard server over ``root``, bound but not yet serving.

    ``port=0`` picks a free port; the server's ``url`` says which. Call
    ``serve_forever()`` (in a thread, for tests) and ``shutdown()``.

    Raises
    ------
    FileNotFoundError
        ``root`` is not a directory.
    OSError
        The address cannot be bound (e.g. the port is in use).
    """
    return _Server((host, port), RunStore(root), verbose)


def serve(root: str | os.PathLike[str], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve the dashboard until interrupted, after printing one line with its address."""
    server = make_server(root, host, port)
    print(f"ember-np dashboard: {server.url} (runs root {server.store.root}; Ctrl-C stops it)")
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"note: listening on {host}, reachable from other machines", file=sys.stderr)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
