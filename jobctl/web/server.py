"""``jobctl serve``'s server: bind the address, say where, run the application under uvicorn."""

from __future__ import annotations

import ipaddress
import socket
from typing import TextIO

from ..errors import Invalid
from ..store.base import Store

__all__ = ["parse_listen", "is_loopback", "bind", "serve"]

#: Seconds a stopping server waits for open requests (open change streams are ended first).
SHUTDOWN_SECONDS = 2


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) -> ``(host, port)``; ``invalid`` otherwise."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise Invalid(f"--listen {text!r} is not HOST:PORT (127.0.0.1:8080, [::1]:8080)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address only this machine reaches (a name other than localhost is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one); OSError when the address is taken."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _name, address = info[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def serve(
    store: Store, sock: socket.socket, token: str | None, allow_shell: bool, out: TextIO, *, access_log: bool = False
) -> None:
    """Serve ``store`` on ``sock`` until SIGINT or SIGTERM; the URL goes to ``out`` first, flushed."""
    import uvicorn

    from .app import LOOPBACK_HOSTS, create_app

    host = sock.getsockname()[0]
    # Without a token only loopback is served (the caller made sure), and only loopback Host names answered.
    hosts = None if token else LOOPBACK_HOSTS if is_loopback(host) else None
    app = create_app(store, token, allow_shell=allow_shell, hosts=hosts)
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        access_log=access_log,
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        server_header=False,
    )
    end_streams = app.state.end_streams

    class _Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # A change stream never ends by itself: end each one first, or the stop waits out its
            # graceful timeout and then cancels them with a traceback each.
            end_streams()
            await super().shutdown(sockets)

    server = _Server(config)
    out.write(url_of(sock) + "\n")
    out.flush()
    server.run(sockets=[sock])
