"""Real HTTP servers on 127.0.0.1 for the fetch tests: a file server and a forward proxy."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import re
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class ServedFile:
    """A file the server offers, and how it misbehaves."""

    body: bytes
    ranges: bool = True  # honour Range requests
    cut_first: int = 0  # this many responses stop after half the body, then the connection drops
    fail_first: int = 0  # this many responses are HTTP 503
    announce_length: bool = True  # False: no Content-Length, the body ends when the line closes
    trickle_s: float = 0.0  # send one byte, then wait this long, and so on
    stall_after: int | None = None  # send this many bytes, then hold the line silent
    length_header: str | None = None  # sent as Content-Length; the body ends when the line closes
    trickle_headers_s: float = 0.0  # a header line sent a byte at a time, never ended
    redirect_to: str | None = None  # answered with a 302 to this Location
    served: int = 0


@dataclass
class FileServer:
    """State shared with the handler: files by path, a simple index, and a request log."""

    files: dict[str, ServedFile] = field(default_factory=dict)
    index: dict[str, list[dict]] = field(default_factory=dict)
    log: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range)
    port: int = 0
    release: threading.Event = field(default_factory=threading.Event)  # ends stalls

    def url(self, path: str) -> str:
        """Absolute URL of ``path`` on this server."""
        return f"http://127.0.0.1:{self.port}{path}"

    def add(self, path: str, body: bytes, **behaviour) -> str:
        """Serve ``body`` at ``path``; returns its URL."""
        self.files[path] = ServedFile(body, **behaviour)
        return self.url(path)

    def publish(self, project: str, filename: str, body: bytes) -> None:
        """List ``filename`` with ``body``'s sha256 in the PEP 691 index under ``project``."""
        digest = hashlib.sha256(body).hexdigest()
        self.index.setdefault(project, []).append(
            {"filename": filename, "url": f"/files/{filename}", "hashes": {"sha256": digest}}
        )

    def requests_for(self, path: str) -> list[tuple[str, str, str | None]]:
        """Logged requests for ``path``."""
        return [entry for entry in self.log if entry[1] == path]


def _file_handler(state: FileServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            state.log.append(("GET", path, self.headers.get("Range")))
            match = re.fullmatch(r"/simple/([^/]+)/", path)
            if match and path not in state.files:
                self._index(match.group(1))
                return
            served = state.files.get(path)
            if served is None:
                self._send(404, b"not found")
                return
            served.served += 1
            if served.served <= served.fail_first:
                self._send(503, b"try later")
                return
            if served.trickle_headers_s:
                self._trickle_headers(served.trickle_headers_s)
                return
            if served.redirect_to is not None:
                self.send_response(302)
                self.send_header("Location", served.redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body, start = served.body, 0
            header = self.headers.get("Range")
            if header and served.ranges:
                start = int(re.fullmatch(r"bytes=(\d+)-", header).group(1))
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            if served.ranges:
                self.send_header("Accept-Ranges", "bytes")
            part = body[start:]
            if served.length_header is not None:
                self.send_header("Content-Length", served.length_header)
                self.send_header("Connection", "close")
                self.close_connection = True
            elif served.announce_length:
                self.send_header("Content-Length", str(len(part)))
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            try:
                self._body(served, part)
            except OSError:
                self.close_connection = True  # the client hung up, as a bounded client may

        def _trickle_headers(self, interval: float) -> None:
            # Each byte resets a client's read timeout: only a time budget ends this.
            self.close_connection = True
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while not state.release.wait(interval):
                    self.wfile.write(b"a")
                    self.wfile.flush()
            except OSError:
                pass  # the client hung up

        def _body(self, served: ServedFile, part: bytes) -> None:
            if served.served <= served.fail_first + served.cut_first:
                self.wfile.write(part[: len(part) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            if served.stall_after is not None:
                self.wfile.write(part[: served.stall_after])
                self.wfile.flush()
                state.release.wait(60)
                self.close_connection = True
                return
            if served.trickle_s:
                for i in range(len(part)):
                    self.wfile.write(part[i : i + 1])
                    self.wfile.flush()
                    time.sleep(served.trickle_s)
                return
            self.wfile.write(part)

        def _index(self, project: str) -> None:
            files = state.index.get(project)
            if files is None:
                self._send(404, b"no such project")
                return
            body = json.dumps({"meta": {"api-version": "1.0"}, "name": project, "files": files})
            self._send(200, body.encode(), "application/vnd.pypi.simple.v1+json")

        def _send(self, status: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _proxy_handler(seen: list[str]) -> type[http.server.BaseHTTPRequestHandler]:
    class Proxy(http.server.BaseHTTPRequestHandler):
        """A forward proxy for plain-HTTP absolute-form requests, recording each one."""

        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_CONNECT(self) -> None:
            # HTTPS through the proxy (pip): a byte tunnel to host:port.
            seen.append(f"CONNECT {self.path}")
            host, _, port = self.path.rpartition(":")
            try:
                upstream = socket.create_connection((host, int(port)), timeout=30)
            except OSError:
                self.send_error(502)
                return
            self.send_response(200, "Connection established")
            self.end_headers()
            self.close_connection = True
            _tunnel(self.connection, upstream)

        def do_GET(self) -> None:
            seen.append(self.path)
            target = urlsplit(self.path)
            upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
            path = target.path + (f"?{target.query}" if target.query else "")
            headers = {k: v for k, v in self.headers.items() if k.lower() != "proxy-connection"}
            upstream.request("GET", path, headers=headers)
            response = upstream.getresponse()
            body = response.read()
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            upstream.close()

    return Proxy


def _tunnel(client: socket.socket, upstream: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    sockets = [client, upstream]
    try:
        while True:
            readable, _, _ = select.select(sockets, [], [], 60)
            if not readable:
                return
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    return
                (upstream if sock is client else client).sendall(data)
    except OSError:
        return
    finally:
        upstream.close()


class Running:
    """A ThreadingHTTPServer on 127.0.0.1:0 served from a daemon thread until ``stop``."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Shut the server down and close its socket."""
        self.server.shutdown()
        self.server.server_close()


def start_file_server() -> tuple[FileServer, Running]:
    """A file server with empty state; add files with ``state.add``."""
    state = FileServer()
    running = Running(_file_handler(state))
    state.port = running.port
    return state, running


def start_proxy() -> tuple[list[str], Running]:
    """A recording forward proxy; the list collects the absolute URLs it forwarded."""
    seen: list[str] = []
    return seen, Running(_proxy_handler(seen))
