"""The side-by-side page (issue 45): one question, two to four variants
written as an experiment file's ``[[variant]]`` tables, each a real chat turn
driven by its own endpoint, model, system prompt and temperature; bad input
is a form error (HTTP 400) that writes nothing. The page in a browser is
``test_side_by_side_browser.py``."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlparse

import pytest
from django.urls import reverse

from agentlab.testing.stub_llm import StubLLMServer, final_answer_reply
from common.errors import BadInput
from evaluation.experiments.side_by_side import side_by_side_read, side_by_side_start, variants_text
from turns.jobs.run import turn_provider
from turns.jobs.tasks import turn_run
from turns.models import Turn
from turns.services.enqueue import hand_over_set

pytestmark = pytest.mark.django_db(transaction=True)

TWO = """
[[variant]]
name = "Alpha"
model = "alpha"
temperature = 0.2
system_prompt = "You are Alpha."

[[variant]]
name = "Beta"
model = "beta"
base_url = "BETA_URL"
temperature = 1.1
max_steps = 3
"""


@pytest.fixture
def handed_over():
    """The turns handed to a job (recorded instead of run): the test drives them."""
    ids: list[int] = []
    previous = hand_over_set(ids.append)
    yield ids
    hand_over_set(previous)


@pytest.fixture
def configured(settings):
    settings.AGENTLAB_LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.AGENTLAB_LLM_API_KEY = "configured-key"
    settings.AGENTLAB_MODEL = "configured-model"
    return settings


def _answer(name: str):
    def handler(body):
        return final_answer_reply(f"{name} says 42", "", "", usage=(10, 5))

    return handler


def test_each_variant_is_a_chat_turn_driven_by_its_own_endpoint_and_options(staff, handed_over, configured):
    with StubLLMServer(_answer("alpha")) as one, StubLLMServer(_answer("beta")) as two:
        configured.AGENTLAB_LLM_BASE_URL = one.base_url
        request = side_by_side_read("What is 6*7?", TWO.replace("BETA_URL", two.base_url))
        turns = side_by_side_start(owner=staff, request=request)
        assert handed_over == [t.pk for t in turns]  # handed over after the commit
        for turn in turns:
            turn_run.apply(args=(turn.pk,))
        # the configured endpoint drives Alpha with its model, prompt and temperature; Beta its own
        assert [(r["model"], r["temperature"]) for r in one.requests] == [("alpha", 0.2)]
        assert one.requests[0]["messages"][0] == {"role": "system", "content": "You are Alpha."}
        assert [(r["model"], r["temperature"]) for r in two.requests] == [("beta", 1.1)]
    alpha, beta = (Turn.objects.get(pk=t.pk) for t in turns)
    assert (alpha.kind, alpha.conversation_id, alpha.owner_id) == ("chat", None, staff.pk)
    assert (alpha.status, alpha.answer, beta.status, beta.answer) == (
        "succeeded",
        "alpha says 42",
        "succeeded",
        "beta says 42",
    )
    assert alpha.agent_options == {
        "variant": "Alpha", "model": "alpha", "system_prompt": "You are Alpha.", "temperature": 0.2,
    }  # fmt: skip
    assert (beta.agent_options["base_url"], beta.max_steps, alpha.max_steps) == (two.base_url, 3, 6)
    assert (alpha.usage["input_tokens"], beta.usage["output_tokens"]) == (10, 5)
    assert [e.type for e in beta.events.order_by("seq")][-1] == "turn.answered"


def test_the_configured_key_goes_only_to_the_configured_endpoint(configured):
    async def keys() -> list[str | None]:
        found = []
        for options in (
            {"model": "m"},
            {"base_url": configured.AGENTLAB_LLM_BASE_URL, "model": "m"},
            {"base_url": "http://elsewhere.example/v1", "model": "m"},
        ):
            provider = turn_provider(options)
            assert provider is not None and provider.model == "m"
            found.append(provider._client.api_key)  # type: ignore[attr-defined]
            await provider.aclose()
        return found

    assert asyncio.run(keys()) == ["configured-key", "configured-key", "not-needed"]
    assert turn_provider({}) is None and turn_provider({"system_prompt": "x"}) is None


BAD = [
    ("", TWO, "question: type a question first"),
    ("q", '[[variant]]\nname = "only"\nmodel = "m"\n', "variants: 1 variant; side by side compares 2 to 4"),
    ("q", "".join(f'[[variant]]\nname = "v{i}"\nmodel = "m"\n' for i in range(5)), "variants: 5 variants"),
    ("q", "", "variants: 0 variants"),
    ("q", "[[variant]\nname = 1", "variants: not TOML"),
    ("q", 'model = "m"\n' + TWO, "variants: unknown key 'model' outside the [[variant]] tables"),
    (
        "q",
        TWO.replace("temperature = 0.2", "temprature = 0.2"),
        "unknown key 'temprature' (did you mean 'temperature'?)",
    ),
    (
        "q",
        TWO.replace("temperature = 0.2", "temperature = 3.0"),
        "variant 'Alpha': temperature must be between 0 and 2",
    ),
    ("q", TWO.replace("temperature = 0.2", 'temperature = "hot"'), "variant: temperature: expected a number"),
    ("q", TWO.replace("BETA_URL", "ftp://x"), "variant 'Beta': base_url must be an http:// or https:// URL"),
    ("q", TWO.replace("max_steps = 3", "max_steps = 0"), "variant 'Beta': max_steps must be between 1"),
    ("q", TWO.replace('name = "Beta"', 'name = "Alpha"'), "two variants have the name"),
    (
        "q",
        TWO.replace('system_prompt = "You are Alpha."', 'system_prompt_file = "/etc/passwd"'),
        "system_prompt_file is not taken side by side",
    ),
    ("q", TWO.replace("max_steps = 3", 'api_key_env = "HOME"'), "api_key_env is not taken side by side"),
    ("q", TWO.replace("max_steps = 3", "review = false"), "review is not taken side by side"),
    (
        "q",
        '[[variant]]\nname = "a"\n[[variant]]\nname = "b"\nmodel = "m"\n',
        "variant 'a': the variant overrides nothing",
    ),
]


@pytest.mark.parametrize(("question", "text", "expected"), BAD, ids=[f"bad-{i}" for i in range(len(BAD))])
def test_bad_input_is_a_400_form_error_naming_what_and_nothing_is_written(
    client, staff, handed_over, configured, question, text, expected
):
    client.force_login(staff)
    response = client.post(reverse("side_by_side"), {"question": question, "variants": text})
    assert response.status_code == 400
    error = response.context["form"]["error"]
    assert expected in error, error
    assert error.startswith(("question:", "variants:"))
    assert (Turn.objects.count(), handed_over) == (0, [])
    assert (response.context["form"]["question"], response.context["form"]["variants"]) == (question, text)
    with pytest.raises(BadInput):
        side_by_side_read(question, text)


def test_a_model_without_an_endpoint_is_refused_on_the_embedded_model(settings):
    settings.AGENTLAB_LLM_BASE_URL = ""
    with pytest.raises(BadInput, match="model needs an endpoint"):
        side_by_side_read(
            "q",
            '[[variant]]\nname = "a"\nmodel = "/etc/passwd"\n[[variant]]\nname = "b"\ntemperature = 0.5\n',
        )
    assert side_by_side_read(
        "q", '[[variant]]\nname = "a"\ntemperature = 0.1\n[[variant]]\nname = "b"\ntemperature = 0.5\n'
    )


def test_the_page_asks_redirects_to_the_columns_and_reloads_them(client, staff, handed_over, configured):
    client.force_login(staff)
    page = client.get(reverse("side_by_side"))
    assert page.status_code == 200 and 'name="variants"' in page.content.decode()
    response = client.post(
        reverse("side_by_side"),
        {"question": "What is 6*7?", "variants": TWO.replace("BETA_URL", "http://127.0.0.1:9/v1")},
    )
    assert response.status_code == 302
    ids = [int(i) for i in parse_qs(urlparse(response["Location"]).query)["turn"]]
    assert ids == handed_over and len(ids) == 2
    shown = client.get(response["Location"])
    html = shown.content.decode()
    assert shown.status_code == 200
    assert [c["name"] for c in shown.context["columns"]] == ["Alpha", "Beta"]
    assert [t["id"] for t in shown.context["page_data"]["turns"]] == ids
    for turn_id in ids:
        assert f'id="turn-{turn_id}"' in html and f'name="_selected_action" value="{turn_id}"' in html
    assert shown.context["form"]["question"] == "What is 6*7?"
    # the form holds the variants again: asking them again reads back the same options
    again = side_by_side_read("q", shown.context["form"]["variants"])
    assert [v.options for v in again.variants] == [
        {"model": "alpha", "system_prompt": "You are Alpha.", "temperature": 0.2},
        {"model": "beta", "base_url": "http://127.0.0.1:9/v1", "temperature": 1.1, "max_steps": 3},
    ]
    assert (
        variants_text(list(Turn.objects.filter(pk__in=ids).order_by("pk")))
        == shown.context["form"]["variants"]
    )


@pytest.mark.parametrize(
    ("query", "status"),
    [("?turn=abc&turn=1", 400), ("?turn=1", 400), ("?turn=1&turn=1", 400), ("?turn=999998&turn=999999", 404)],
)
def test_a_bad_turn_list_is_a_4xx(client, staff, query, status):
    client.force_login(staff)
    assert client.get(reverse("side_by_side") + query).status_code == status


def test_an_ordinary_chat_turn_is_not_shown_side_by_side(client, staff, owner):
    from turns.services import turn_create

    a, b = (turn_create(owner=owner, question="q") for _ in range(2))
    client.force_login(staff)
    assert client.get(f"{reverse('side_by_side')}?turn={a.pk}&turn={b.pk}").status_code == 404


def test_staff_only(client, owner, handed_over):
    url = reverse("side_by_side")
    assert client.get(url).status_code == 302  # to log in
    client.force_login(owner)
    assert client.get(url).status_code == 403
    assert client.post(url, {"question": "q", "variants": TWO}).status_code == 403
    assert 'href="/side-by-side/"' not in client.get(reverse("chat:conversation_list")).content.decode()
    assert (Turn.objects.count(), handed_over) == (0, [])


def test_the_chat_nav_links_the_page_for_staff(client, staff):
    client.force_login(staff)
    assert 'href="/side-by-side/"' in client.get(reverse("chat:conversation_list")).content.decode()


def test_the_api_asks_side_by_side_for_staff_and_says_bad_input_in_its_error_shape(
    staff, owner, handed_over, configured
):
    from apikeys.services import apikey_create
    from tests.api_support import ApiClient, assert_error

    body = {"question": "What is 6*7?", "variants": TWO.replace("BETA_URL", "http://127.0.0.1:9/v1")}
    created = ApiClient(staff).post("/api/side-by-side", body)
    assert created.status_code == 201, created.content
    data = created.json()
    assert data["turn_ids"] == handed_over and data["variants"] == ["Alpha", "Beta"]
    assert data["page"] == f"/side-by-side/?turn={data['turn_ids'][0]}&turn={data['turn_ids'][1]}"
    turns = [Turn.objects.get(pk=pk) for pk in data["turn_ids"]]
    assert [(t.owner_id, t.question, t.agent_options["variant"]) for t in turns] == [
        (staff.pk, "What is 6*7?", "Alpha"),
        (staff.pk, "What is 6*7?", "Beta"),
    ]

    one = {"question": "q", "variants": '[[variant]]\nname = "only"\nmodel = "m"\n'}
    error = assert_error(ApiClient(staff).post("/api/side-by-side", one), 400, "bad_input")
    assert error["message"].startswith("variants: 1 variant; side by side compares 2 to 4")
    five = {
        "question": "q",
        "variants": "".join(f'[[variant]]\nname = "v{i}"\nmodel = "m"\n' for i in range(5)),
    }
    assert (
        "5 variants"
        in assert_error(ApiClient(staff).post("/api/side-by-side", five), 400, "bad_input")["message"]
    )
    unknown = {"question": "q", "variants": body["variants"].replace("max_steps", "max_stesp")}
    assert (
        "unknown key 'max_stesp'"
        in assert_error(ApiClient(staff).post("/api/side-by-side", unknown), 400, "bad_input")["message"]
    )
    forbidden = assert_error(ApiClient(owner).post("/api/side-by-side", body), 403, "forbidden")
    assert forbidden["message"] == "only staff may ask side by side"
    _, raw = apikey_create(name="ci", created_by=staff, scope="run")
    assert_error(ApiClient(api_key=raw, csrf=False).post("/api/side-by-side", body), 403, "forbidden")
    assert_error(ApiClient().post("/api/side-by-side", body), 401, "unauthenticated")
    assert Turn.objects.count() == 2 and len(handed_over) == 2  # the refused requests wrote nothing
