"""``jobctl serve``: the HTTP API and the pipeline page for one store (needs the ``web`` extra)."""

from __future__ import annotations

import sys

import click

from ..errors import Refused
from .main import EXIT_FAILURE, TEXT, JobCommand, State, pass_state, store_option

__all__ = ["serve"]


@click.command(cls=JobCommand, short_help="Serve the HTTP API and the pipeline page for one store.")
@click.option(
    "--listen",
    type=TEXT,
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to listen; port 0 takes a free one. An address other than loopback needs --token.",
)
@click.option(
    "--token",
    type=TEXT,
    envvar="JOBCTL_TOKEN",
    show_envvar=True,
    help="Every request must carry it (Authorization: Bearer TOKEN; a browser opens /?token=TOKEN once).",
)
@click.option("--allow-shell", is_flag=True, help="Take shell jobs over HTTP: they run commands as the worker's user.")
@store_option  # not --json: what it prints is one URL
@pass_state
def serve(state: State, listen: str, token: str | None, allow_shell: bool) -> None:
    """Serve the store over HTTP: a JSON API, a stream of changes, and a page.

    Prints the URL it serves on stdout once it listens, then serves until
    SIGINT or SIGTERM. The API (docs/reference/http.md) submits jobs,
    shows them and their pipelines, and approves, cancels and retries
    them; / is a page that shows the pipelines' stages as they change.

    It listens on loopback unless told otherwise; any other address is
    refused (a usage error) without a token. An address it cannot listen
    on (another server has it, say) is one line naming it, exit 1. Shell
    jobs are refused over HTTP unless --allow-shell. Needs the web extra:
    pip install 'jobctl[web]'.

    \b
    Examples:
      jobctl serve
      JOBCTL_TOKEN=$(openssl rand -hex 16) jobctl serve --listen 0.0.0.0:8080
    """
    try:  # before anything else: jobctl.web itself imports Starlette
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        missing = Refused(f"jobctl serve needs Starlette and uvicorn ({exc.name} is not installed)")
        missing.hint = "install the web extra: pip install 'jobctl[web]'"
        raise missing from None
    from ..web.server import bind, is_loopback, parse_listen
    from ..web.server import serve as run

    host, port = parse_listen(listen)
    if not token and not is_loopback(host):
        raise click.UsageError(f"--listen {listen} is not a loopback address: give --token or set JOBCTL_TOKEN")
    store = state.store()
    try:
        sock = bind(host, port)
    except OSError as exc:  # taken, or not an address of this machine: one line naming it, exit 1
        click.echo(f"jobctl: cannot listen on {listen}: {exc.strerror or exc}", err=True)
        click.get_current_context().exit(EXIT_FAILURE)
    try:
        run(store, sock, token, allow_shell, sys.stdout)
    finally:
        sock.close()
