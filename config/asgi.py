"""ASGI entry point for daphne: HTTP through Django, websockets through Channels.

Websockets pass the allowed-hosts origin check and session authentication
before routing (``turns.routing``). ``RunAtServerStart`` does the work due at
server start on the first connection (``config.startup``). A header line
too long for Twisted to read gets a 431 (``config.serving``).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from config.serving import answer_oversized_header_lines  # noqa: E402
from config.startup import RunAtServerStart  # noqa: E402
from turns.routing import websocket_urlpatterns  # noqa: E402

answer_oversized_header_lines()  # a 60 KB header line gets a 431, not a dropped connection

application = RunAtServerStart(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
