"""ASGI entry point for daphne: HTTP through Django, websockets through Channels.

Websockets pass the allowed-hosts origin check and session authentication
before routing (``turns.routing``). ``RunAtServerStart`` does the work due at
server start on the first connection (``agentlab.startup``).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentlab.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agentlab.startup import RunAtServerStart  # noqa: E402
from turns.routing import websocket_urlpatterns  # noqa: E402

application = RunAtServerStart(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
