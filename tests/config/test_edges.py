"""Edges of the HTTP and websocket surface (issue 14): bodies a JSON endpoint
cannot read, a websocket to an unrouted path, and the API docs' assets."""

from __future__ import annotations

import re

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (
            "multipart/form-data; boundary=XyZ",
            b'--XyZ\r\nContent-Disposition: form-data; name="question"\r\n\r\nhi\r\n--XyZ--\r\n',
        ),
        ("application/x-www-form-urlencoded", b"question=hi"),
        ("text/plain", b"question=hi"),
        ("application/json", b'{"question": '),
    ],
)
def test_a_body_a_json_endpoint_cannot_read_is_a_4xx_in_the_one_error_shape(
    client, owner, content_type, body
):
    from turns.services import conversation_create

    client.force_login(owner)
    conversation = conversation_create(owner=owner, title="t")
    csrf = client.get("/").cookies.get("csrftoken")
    headers = {"HTTP_X_CSRFTOKEN": csrf.value} if csrf else {}
    response = client.post(
        f"/api/conversations/{conversation.pk}/turns", data=body, content_type=content_type, **headers
    )
    assert 400 <= response.status_code < 500, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"} and error["message"]
    assert conversation.turns.count() == 0


@pytest.mark.parametrize("path", ["/ws/nowhere/", "/ws/turns/", "/", "/ws/turns/1/extra/"])
async def test_a_websocket_to_an_unrouted_path_is_closed_with_4404(path):
    from channels.routing import URLRouter

    from turns.routing import websocket_urlpatterns

    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}


def test_the_api_docs_load_swagger_ui_from_the_project_not_a_cdn(client, owner):
    client.force_login(owner)
    page = client.get("/api/docs").content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    scripts = [a for a in assets if a.endswith((".js", ".css"))]
    assert any("swagger-ui-bundle" in a for a in scripts), assets
    assert not [a for a in assets if a.startswith(("http:", "https:", "//"))], assets
    for asset in scripts:
        assert asset.startswith("/static/"), asset
        assert finders.find(asset.removeprefix("/static/")) is not None, asset
