"""jobctl over HTTP: a JSON API, a stream of changes and a pipeline page for one store.

``create_app(store, token=None)`` is an ASGI application (Starlette) that
``jobctl serve`` runs and that a FastAPI or Starlette application mounts
under a prefix of its own (docs/howto/web.md, docs/reference/http.md).
It needs the ``web`` extra: ``pip install 'jobctl[web]'``. Nothing else in
jobctl imports this package, so the command line starts without it.
"""

from .app import COOKIE, LOOPBACK_HOSTS, MAX_BODY_BYTES, create_app

__all__ = ["create_app", "MAX_BODY_BYTES", "COOKIE", "LOOPBACK_HOSTS"]
