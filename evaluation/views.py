"""The side-by-side page (issue 45; docs/chat-and-api.md#side-by-side): a staff
page that sends one question to two to four variants at once and streams
their answers in columns. Thin over ``evaluation.experiments.side_by_side``.

``POST`` checks the question and the ``[[variant]]`` text and starts one
chat turn per variant, then redirects to ``GET ?turn=…&turn=…`` (post,
redirect, get: a reload does not ask again), which shows the turns; the
chat page's script (``turns/static/turns/chat.js``) replays and streams each
from its event log. Bad input shows the form again with the error, HTTP
400, nothing written. A column's "Keep as example…" opens the turn admin's
"Add to dataset…" for that turn (``evaluation.admin.add_to_dataset``): its
question, its answer as the gold to confirm.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_http_methods

from common.errors import BadInput, NotFound
from evaluation.experiments.side_by_side import (
    MAX_VARIANTS,
    MIN_VARIANTS,
    side_by_side_read,
    side_by_side_start,
    side_by_side_turns,
    variants_text,
)
from turns.selectors import turn_summary

TEMPLATE = "chat/side_by_side.html"

#: What the variants box holds on a fresh page: two temperatures of the configured model.
EXAMPLE_VARIANTS = """[[variant]]
name = "steady"
temperature = 0.0

[[variant]]
name = "lively"
temperature = 0.9
"""


@login_required
@ensure_csrf_cookie
@require_http_methods(["GET", "POST"])
def side_by_side(request: HttpRequest) -> HttpResponse:
    """``GET``: the form, and with ``?turn=ID`` (two to four) those turns
    side by side; ``POST`` ``question`` and ``variants``: ask them. Staff only
    (403 for other users)."""
    if not request.user.is_staff:
        raise PermissionDenied("the side-by-side page is for staff")
    if request.method == "POST":
        question = request.POST.get("question", "")
        text = request.POST.get("variants", "")
        try:
            checked = side_by_side_read(question, text)
        except BadInput as exc:
            form = {"question": question, "variants": text, "error": str(exc)}
            return render(request, TEMPLATE, _context(form=form, turns=[]), status=400)
        turns = side_by_side_start(owner=request.user, request=checked)
        query = urlencode([("turn", turn.pk) for turn in turns])
        return redirect(f"{reverse('side_by_side')}?{query}")
    ids = request.GET.getlist("turn")
    if not ids:
        form = {"question": "", "variants": EXAMPLE_VARIANTS, "error": ""}
        return render(request, TEMPLATE, _context(form=form, turns=[]))
    if not all(i.isdigit() and len(i) <= 18 for i in ids):
        form = {"question": "", "variants": EXAMPLE_VARIANTS, "error": "turn: give turn ids (numbers)"}
        return render(request, TEMPLATE, _context(form=form, turns=[]), status=400)
    try:
        turns = side_by_side_turns([int(i) for i in ids])
    except BadInput as exc:
        form = {"question": "", "variants": EXAMPLE_VARIANTS, "error": str(exc)}
        return render(request, TEMPLATE, _context(form=form, turns=[]), status=400)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    form = {"question": turns[0].question, "variants": variants_text(turns), "error": ""}
    return render(request, TEMPLATE, _context(form=form, turns=turns))


def _context(*, form: dict[str, str], turns: list[Any]) -> dict[str, Any]:
    """The template's context: the form's values, each turn with its variant's
    name and options, and the page data ``chat.js`` reads."""
    columns = []
    for turn in turns:
        options = dict(turn.agent_options or {})
        name = options.pop("variant", "")
        columns.append({"turn": turn, "name": name, "options": sorted(options.items())})
    return {
        "form": form,
        "columns": columns,
        "min_variants": MIN_VARIANTS,
        "max_variants": MAX_VARIANTS,
        "page_data": {"turns": [turn_summary(turn) for turn in turns], "feedback": {}},
    }
