"""``GET /metrics``: the Prometheus text exposition of ``agentlab.telemetry``'s
metrics (docs/production.md#metrics), through ``prometheus_client``.

Who may read it: outside a deployment anyone, unless a token is set; in a
deployment (``config.deploy.is_deployment``) only a scraper that sends
``Authorization: Bearer <AGENTLAB_METRICS_TOKEN>`` or comes from an address
in ``AGENTLAB_METRICS_ALLOW`` — with neither setting it is refused, so a
deployment never publishes its metrics by default. A wrong or missing token
is 401 with ``WWW-Authenticate: Bearer`` (RFC 6750), an address not allowed
403; the body is the API's error shape. The address is the connection's
(``REMOTE_ADDR``), never a forwarded header a client could write.
"""

from __future__ import annotations

import hmac
import ipaddress
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from agentlab.telemetry import switches
from agentlab.telemetry.metrics import exposition
from common.api import error_body


@csrf_exempt  # GET and HEAD only: any other method is 405, not a CSRF page
@never_cache
@require_safe
def metrics_endpoint(request: HttpRequest) -> HttpResponse:
    """The metrics as ``text/plain; version=0.0.4``, summed over the
    processes writing to ``PROMETHEUS_MULTIPROC_DIR`` when it is set; 404
    when ``AGENTLAB_METRICS`` is off; 401/403 as the module docstring says."""
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    if not switches().metrics:
        return JsonResponse(error_body(404, "metrics are off (AGENTLAB_METRICS=false)"), status=404)
    body, content_type = exposition(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None)
    return HttpResponse(body, content_type=content_type)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    token: str = settings.AGENTLAB_METRICS_TOKEN
    allowed = settings.AGENTLAB_METRICS_ALLOW
    if not token and not allowed:
        if not settings.DEPLOYMENT:
            return None
        message = "/metrics is closed in a deployment: set AGENTLAB_METRICS_TOKEN or AGENTLAB_METRICS_ALLOW"
        return JsonResponse(error_body(403, message), status=403)
    if allowed and _address_in(request.META.get("REMOTE_ADDR", ""), allowed):
        return None
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        response = JsonResponse(
            error_body(401, "send Authorization: Bearer <AGENTLAB_METRICS_TOKEN>"), status=401
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return JsonResponse(error_body(403, "this address is not in AGENTLAB_METRICS_ALLOW"), status=403)


def _address_in(address: str, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    return any(ip in network for network in networks)
