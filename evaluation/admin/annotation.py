"""The annotation queues in the admin (issue 30; docs/architecture.md#annotation-queues).

The queue list and a queue's page (progress, items, the pairwise result), the
review page that shows one item at a time (``<pk>/review/``: keyboard keys
1–9 for the labels, ``j``/``k`` for next/previous, in
``evaluation/static/evaluation/review.js``), the judge-alignment page
(``<pk>/alignment/``: agreement, Cohen's κ, the confusion matrix, the
disagreements linked) and the "corrected answers → new dataset version"
button. Every write goes through ``evaluation.annotation``; the automatic
score of an item is not in the review page until the reviewer has labelled it.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin import StaffReadOnlyAdmin
from common.errors import AgentLabError, BadInput, NotFound, StateConflict
from evaluation.admin.report import report_url as run_report_url
from evaluation.admin.review_item import item_context
from evaluation.annotation.alignment import human_accuracy, judge_report, pairwise_queue_result
from evaluation.annotation.corrected import judge_corrected_accuracy
from evaluation.annotation.corrections import corrections_to_version
from evaluation.annotation.labelling import claim, give_label, next_item, progress, queue_item
from evaluation.annotation.turn_queues import turn_corrections_to_dataset
from evaluation.models import AnnotationQueue, QueueItem


def review_url(queue_pk: int, position: int | None = None) -> str:
    url = reverse("admin:evaluation_annotationqueue_review", args=[queue_pk])
    return url if position is None else f"{url}?item={position}"


@admin.register(AnnotationQueue)
class AnnotationQueueAdmin(StaffReadOnlyAdmin):
    list_display = ("name", "kind", "run", "filter", "overlap", "progress_display", "links", "created_at")
    list_select_related = ("run",)
    search_fields = ("name", "run__run_id")

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/review/", view(self.review_view), name="evaluation_annotationqueue_review"),
            path(
                "<int:pk>/alignment/", view(self.alignment_view), name="evaluation_annotationqueue_alignment"
            ),
            path(
                "<int:pk>/corrections/",
                view(self.corrections_view),
                name="evaluation_annotationqueue_corrections",
            ),
            *super().get_urls(),
        ]

    @admin.display(description="progress")
    def progress_display(self, queue: AnnotationQueue) -> str:
        counts = progress(queue)
        return f"{counts['labelled']} of {counts['items']} labelled"

    @admin.display(description="pages")
    def links(self, queue: AnnotationQueue) -> SafeString:
        if queue.kind != "single":
            return format_html('<a href="{}">review</a>', review_url(queue.pk))
        alignment = reverse("admin:evaluation_annotationqueue_alignment", args=[queue.pk])
        return format_html(
            '<a href="{}">review</a> · <a href="{}">judge alignment</a>', review_url(queue.pk), alignment
        )

    def _queue(self, request: HttpRequest, pk: int) -> AnnotationQueue:
        if not self.has_view_permission(request):
            raise PermissionDenied
        queue = AnnotationQueue.objects.select_related("run__dataset", "other_run").filter(pk=pk).first()
        if queue is None:
            raise Http404(f"no annotation queue with id {pk}")
        return queue

    def _render(
        self, request: HttpRequest, template: str, title: str, status: int = 200, **extra: Any
    ) -> HttpResponse:
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title, **extra}
        return TemplateResponse(
            request, f"admin/evaluation/annotationqueue/{template}", context, status=status
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The queue's page: progress, its items with their labels, the pairwise result."""
        if not object_id.isdigit():
            raise Http404(f"no annotation queue with id {object_id!r}")
        queue = self._queue(request, int(object_id))
        items = queue.items.select_related("prediction__example", "turn").prefetch_related("labels__reviewer")
        return self._render(
            request,
            "detail.html",
            f"Annotation queue · {queue.name}",
            queue=queue,
            progress=progress(queue),
            items=items,
            pairwise=pairwise_queue_result(queue) if queue.kind == "pairwise" else None,
            review_url=review_url(queue.pk),
            alignment_url=reverse("admin:evaluation_annotationqueue_alignment", args=[queue.pk]),
            corrections_url=reverse("admin:evaluation_annotationqueue_corrections", args=[queue.pk]),
        )

    def _item(self, request: HttpRequest, queue: AnnotationQueue) -> QueueItem | None:
        raw = request.GET.get("item", "")
        if raw:
            if not (raw.isascii() and raw.isdigit() and len(raw) < 9):
                raise Http404(f"no item {raw!r} in queue {queue.name!r}")
            try:
                item = queue_item(queue.pk, int(raw))
            except NotFound as exc:
                raise Http404(str(exc)) from exc
            with suppress(StateConflict):  # held by another reviewer: shown, not labellable
                claim(item, self.acting_user(request))
            return item
        return next_item(queue, self.acting_user(request))

    def review_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """One item at a time: GET shows it (claimed for the reviewer), POST labels it, then the next."""
        queue = self._queue(request, pk)
        user = self.acting_user(request)
        if request.method == "POST":
            return self._label(request, queue)
        item = self._item(request, queue)
        title = f"Review · {queue.name}"
        ends: dict[str, Any] = {
            # a queue over chat turns has no run: no alignment page, no report
            "alignment_url": (
                reverse("admin:evaluation_annotationqueue_alignment", args=[queue.pk])
                if queue.kind == "single" and queue.run_id is not None
                else None
            ),
            "report_url": run_report_url(queue.run_id) if queue.run_id is not None else None,
            "queues_url": reverse("admin:evaluation_annotationqueue_changelist"),
            "continue_url": review_url(queue.pk),
        }
        if item is None:
            return self._render(
                request, "review.html", title, queue=queue, progress=progress(queue), item=None, **ends
            )
        return self._render(
            request, "review.html", title, **item_context(queue, item, user), progress=progress(queue), **ends
        )

    def _label(self, request: HttpRequest, queue: AnnotationQueue) -> HttpResponse:
        raw = request.POST.get("item", "")
        if not (raw.isascii() and raw.isdigit() and len(raw) < 9):
            return HttpResponse("the form names no item", status=400, content_type="text/plain")
        try:
            item = queue_item(queue.pk, int(raw))
            give_label(
                item,
                self.acting_user(request),
                request.POST.get("label", ""),
                tags=request.POST.getlist("tags"),
                note=request.POST.get("note", "").strip(),
                corrected_answer=request.POST.get("corrected_answer", ""),
            )
        except AgentLabError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(review_url(queue.pk, int(raw)))
        # back to the item just labelled: its automatic score is shown there,
        # beside the label, with a link on to the next item
        self.message_user(request, f"Item {item.position} labelled {request.POST['label']}.")
        return HttpResponseRedirect(review_url(queue.pk, item.position))

    def alignment_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The judge-alignment page of the queue's run (a single-run queue's only)."""
        queue = self._queue(request, pk)
        if queue.kind != "single" or queue.run is None:
            raise Http404(f"queue {queue.name!r} is {queue.kind}: judge alignment is a single-run queue's")
        try:
            report = judge_report(queue.run)
        except BadInput as exc:  # a queue with its own labels and no verdict map
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:evaluation_annotationqueue_changelist"))
        for row in report["disagreements"]:
            row["url"] = reverse("admin:evaluation_prediction_change", args=[row["prediction_id"]])
        confusion = report["confusion"]
        rows = [
            {"name": c, "cells": row} for c, row in zip(confusion["classes"], confusion["table"], strict=True)
        ]
        graders = [str(group["judge"]) for group in report["groups"]]
        judged = any(not name.startswith("scorer ") for name in graders)
        for group in report["groups"]:
            name = str(group["judge"])
            group["grader"] = name if name.startswith("scorer ") else f"judge {name}"
        return self._render(
            request,
            "alignment.html",
            # a run scored by a scorer (numeric, exact …) has no judge to align
            f"{'Judge' if judged or not graders else 'Scorer'} alignment · {queue.run.run_id}",
            judged=judged or not graders,
            queue=queue,
            report=report,
            matrix_rows=rows,
            human=human_accuracy(queue.run),
            corrected=judge_corrected_accuracy(queue.run),
        )

    def corrections_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST: the queue's corrected answers become the gold of a new dataset
        version (a chat-turn queue's: new examples of its dataset)."""
        queue = self._queue(request, pk)
        if request.method != "POST":
            return HttpResponse("POST only", status=405, content_type="text/plain")
        try:
            user = self.acting_user(request)
            change = (
                turn_corrections_to_dataset(queue, user=user)
                if queue.kind == "turns"
                else corrections_to_version(queue, user=user)
            )
        except AgentLabError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, change.summary())
        return HttpResponseRedirect(reverse("admin:evaluation_annotationqueue_changelist"))
