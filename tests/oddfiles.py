"""Odd files to plant where a store expects a regular one (the odd-file tests of fsio and of the command line)."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def bind_socket(path: Path) -> None:
    """A Unix socket at ``path`` (bound by its name alone: a socket's path is limited to about 100 bytes)."""
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)  # the socket file stays when the socket is closed
    finally:
        os.chdir(here)
