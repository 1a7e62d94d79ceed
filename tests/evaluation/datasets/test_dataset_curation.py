"""Curating a dataset in the admin: an edit or a removal makes a new version,
the example list shows a version, the dataset page lists its versions."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from evaluation.datasets.services import dataset_import
from evaluation.datasets.spec import ExampleSpec
from evaluation.datasets.versions import examples_at
from evaluation.models import Dataset, DatasetVersion, Example

pytestmark = pytest.mark.django_db

EXAMPLE_LIST = reverse("admin:evaluation_example_changelist")


@pytest.fixture
def capitals():
    return dataset_import(
        name="capitals",
        examples=[
            ExampleSpec(external_id="fr", question="Capital of France?", answer="Paris", task_type="qa"),
            ExampleSpec(external_id="au", question="Capital of Australia?", answer="Sydney", task_type="qa"),
            ExampleSpec(external_id="jp", question="Capital of Japan?", answer="Tokyo", task_type="qa"),
        ],
    )


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


def edit_url(example: Example) -> str:
    return reverse("admin:evaluation_example_new_version", args=[example.pk])


def form_of(example: Example, **changes: str) -> dict[str, str]:
    data = {
        "question": example.question,
        "answer": example.answer,
        "task_type": example.task_type,
        "scorer": "",
        "choices": "",
        "context": "{}",
        "metadata": "{}",
        "note": "",
    }
    return {**data, **changes}


def text(response) -> str:
    """The page's words, lower case (the admin capitalises messages and labels)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split()).lower()


def test_an_edit_in_the_admin_makes_a_new_version_and_keeps_the_old_content(staff_client, capitals, staff):
    wrong = Example.objects.get(dataset=capitals, external_id="au")
    page = staff_client.get(edit_url(wrong))
    assert page.status_code == 200
    assert 'name="answer"' in page.content.decode() and "\nSydney</textarea>" in page.content.decode()
    assert 'value="Save as version 2"' in page.content.decode()

    response = staff_client.post(edit_url(wrong), form_of(wrong, answer="Canberra", note="gold was wrong"))
    fixed = Example.objects.get(dataset=capitals, external_id="au", valid_to__isnull=True)
    assert response.status_code == 302 and response["Location"] == reverse(
        "admin:evaluation_example_change", args=[fixed.pk]
    )
    wrong.refresh_from_db()
    assert (wrong.answer, wrong.valid_from, wrong.valid_to) == ("Sydney", 1, 2)
    assert (fixed.answer, fixed.valid_from, fixed.valid_to) == ("Canberra", 2, None)
    version = DatasetVersion.objects.get(dataset=capitals, number=2)
    assert (version.changed, version.added, version.removed, version.total) == (1, 0, 0, 3)
    assert version.source == "admin: edit of au — gold was wrong" and version.created_by == staff
    assert Example.objects.count() == 4  # the two untouched examples are shared

    page = text(staff_client.get(reverse("admin:evaluation_example_change", args=[fixed.pk])))
    assert "dataset capitals: version 2 — 0 added, 1 changed, 0 removed (3 examples)" in page
    assert (
        "task type 1 capital of australia? sydney qa 2–latest capital of australia? canberra qa "
        "edit — makes a new version" in page
    )

    # the old content's page sends an edit to the current one
    stale = staff_client.post(edit_url(wrong), form_of(wrong, answer="Melbourne"))
    assert stale["Location"] == reverse("admin:evaluation_example_change", args=[fixed.pk])
    assert Dataset.objects.get(pk=capitals.pk).version == 2

    # the same content again makes no version
    same = staff_client.post(edit_url(fixed), form_of(fixed))
    assert same.status_code == 302 and Dataset.objects.get(pk=capitals.pk).version == 2


def test_a_bad_edit_is_shown_on_the_form_and_writes_nothing(staff_client, capitals):
    example = Example.objects.get(dataset=capitals, external_id="fr")
    response = staff_client.post(edit_url(example), form_of(example, context="{not json", metadata="[1]"))
    assert response.status_code == 200
    page = text(response)
    assert "not json: expecting property name enclosed in double quotes (line 1, column 2)" in page
    assert "must be a json object ({…})" in page
    response = staff_client.post(edit_url(example), form_of(example, question="", scorer="nope"))
    assert response.status_code == 200
    assert "select a valid choice. nope is not one of the available choices." in text(response)
    assert "this field is required." in text(response)
    assert Dataset.objects.get(pk=capitals.pk).version == 1 and Example.objects.count() == 3


def test_removal_makes_a_version_and_the_list_shows_any_version(staff_client, capitals):
    au = Example.objects.get(dataset=capitals, external_id="au")
    response = staff_client.post(
        EXAMPLE_LIST, {"action": "remove_examples", "_selected_action": [au.pk]}, follow=True
    )
    assert "dataset capitals: version 2 — 0 added, 0 changed, 1 removed (2 examples)" in text(response)
    assert list(examples_at(capitals).values_list("external_id", flat=True)) == ["fr", "jp"]

    def listed(query: str) -> list[str]:
        page = staff_client.get(f"{EXAMPLE_LIST}?{query}").content.decode()
        return re.findall(r'class="field-external_id"><a href="[^"]+">([^<]+)</a>', page)

    assert listed("") == ["fr", "jp"]
    assert listed(f"dataset__id__exact={capitals.pk}&version=1") == ["fr", "au", "jp"]
    assert sorted(listed("version=all")) == ["au", "fr", "jp"]
    # a version the dataset does not have, or a version with no dataset chosen: nothing, not the latest
    assert listed(f"dataset__id__exact={capitals.pk}&version=9") == []
    assert listed("version=1") == []

    # removing what is left would empty the dataset: refused, nothing written
    rest = list(examples_at(capitals).values_list("pk", flat=True))
    response = staff_client.post(
        EXAMPLE_LIST, {"action": "remove_examples", "_selected_action": rest}, follow=True
    )
    assert "this change would leave it with no examples; nothing done" in text(response)
    assert Dataset.objects.get(pk=capitals.pk).version == 2


def test_the_demo_dataset_does_not_change(staff_client):
    from evaluation.datasets.services import dataset_resolve

    demo = dataset_resolve(name_or_path="demo")
    example = examples_at(demo).first()
    assert example is not None
    response = staff_client.post(edit_url(example), form_of(example, answer="changed"))
    assert response.status_code == 200
    assert "dataset 'demo' is the project's own demo and does not change" in text(response)
    response = staff_client.post(
        EXAMPLE_LIST, {"action": "remove_examples", "_selected_action": [example.pk]}, follow=True
    )
    assert "is the project's own demo and does not change" in text(response)
    assert Dataset.objects.get(pk=demo.pk).version == 1 and examples_at(demo).count() == 8


def test_the_dataset_page_lists_its_versions_with_what_changed(staff_client, capitals):
    example = Example.objects.get(dataset=capitals, external_id="au")
    staff_client.post(edit_url(example), form_of(example, answer="Canberra"))
    page = text(staff_client.get(reverse("admin:evaluation_dataset_change", args=[capitals.pk])))
    assert "version 2" in page and "0 added, 1 changed, 0 removed; 3 in all changed: au." in page
    assert "3 added, 0 changed, 0 removed; 3 in all added: fr, au, jp." in page
    assert "examples (latest version): 3" in page


def test_curation_needs_staff(client, outsider, capitals):
    client.force_login(outsider)
    example = Example.objects.get(dataset=capitals, external_id="au")
    response = client.post(edit_url(example), form_of(example, answer="Canberra"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert Dataset.objects.get(pk=capitals.pk).version == 1
