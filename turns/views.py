"""The chat pages (issue 5): thin views over ``turns.selectors`` and ``turns.services``.

The conversation page is server-rendered; its script (``turns/static/turns/chat.js``)
asks questions and presses buttons through the HTTP API and watches turns over
the websocket (docs/chat-and-api.md#the-websocket-protocol), so reloading it replays every turn from its log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_http_methods, require_POST

from agentlab.agent.text import clean_text
from common.errors import NotFound
from turns import selectors, services
from turns.models import MAX_QUESTION_CHARS, HistoryMode


@login_required
@require_http_methods(["GET", "POST"])
def conversation_list(request: HttpRequest) -> HttpResponse:
    """My conversations; POST ``question`` starts a new conversation with it."""
    error = ""
    if request.method == "POST":
        question = clean_text(request.POST.get("question", "")).strip()
        history = request.POST.get("history", "")
        if history not in ("", *HistoryMode.values):
            error = "Choose what each turn is given of the conversation from the list."
        elif len(question) > MAX_QUESTION_CHARS:
            error = (
                f"A question is at most {MAX_QUESTION_CHARS:,} characters; this one has {len(question):,}."
            )
        elif question:
            conversation = services.conversation_create(
                owner=request.user,  # type: ignore[arg-type]
                title=question[:80],
                history=history,
            )
            services.turn_start(conversation=conversation, question=question, acting_user=request.user)  # type: ignore[arg-type]
            return redirect("chat:conversation_detail", conversation_id=conversation.pk)
        else:
            error = "Type a question first."
    conversations = selectors.conversation_list(user=request.user)[:200]  # type: ignore[arg-type]
    context = {
        "conversations": conversations,
        "error": error,
        "history_default": settings.AGENTLAB_CHAT_HISTORY,
        "history_modes": HistoryMode.choices,
        "max_question": MAX_QUESTION_CHARS,
    }
    return render(request, "chat/conversation_list.html", context)


@login_required
@ensure_csrf_cookie
def conversation_detail(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """One conversation: its turns, replayed and streamed by the page's script."""
    try:
        conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)  # type: ignore[arg-type]
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    turns = selectors.conversation_turns(conversation=conversation)
    return render(
        request,
        "chat/conversation_detail.html",
        {
            "conversation": conversation,
            "heading": conversation_heading(conversation, turns),
            "turns": turns,
            "max_question": MAX_QUESTION_CHARS,
            "page_data": {
                "conversationId": conversation.pk,
                "turns": [selectors.turn_summary(t) for t in turns],
                # the user's current rating of each turn (turns/static/turns/feedback.js)
                "feedback": selectors.feedback_of(user=request.user, turns=turns),  # type: ignore[arg-type]
            },
        },
    )


def conversation_heading(conversation: Any, turns: Sequence[Any]) -> str:
    """The page's heading: the conversation's title — unless that is only its
    first question (a new conversation's title), which its first turn shows
    right below: then "Conversation" and when it started, not the question twice."""
    title = conversation.title or ""
    if not title or (turns and turns[0].question.startswith(title)):
        return f"Conversation of {conversation.created_at:%Y-%m-%d %H:%M}"
    return title


@login_required
@require_POST
def conversation_delete(request: HttpRequest, conversation_id: int) -> HttpResponse:
    try:
        conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)  # type: ignore[arg-type]
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    services.conversation_delete(conversation_id=conversation.pk)
    return redirect("chat:conversation_list")
