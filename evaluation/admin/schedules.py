"""The evaluation schedules (issue 17): add, edit, disable and delete them
here; each save writes the django-celery-beat ``PeriodicTask`` that fires it
(``evaluation.schedules.sync``). A schedule whose options ``run_eval`` would
refuse is a form error on the field concerned, never a server error.

Staff see the schedules; adding, changing and deleting take Django's model
permissions (a superuser has them)."""

from __future__ import annotations

import copy
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.forms.models import construct_instance
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.admin import DASH, admin_link, url_query
from evaluation.admin.regressions import regression_badge
from evaluation.models import EvalSchedule, Run
from evaluation.schedules.options import schedule_check
from evaluation.schedules.sync import schedule_delete, schedule_save


class EvalScheduleForm(forms.ModelForm):
    """The schedule form: the model's own checks, then ``schedule_check``
    (the options as ``run_eval`` checks them), each error on its field."""

    class Meta:
        model = EvalSchedule
        fields = "__all__"

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean()
        if self.errors:
            return cleaned  # a field's own error first: the options cannot be read yet
        # the schedule as it would be saved, without touching self.instance yet
        candidate = construct_instance(self, copy.copy(self.instance))
        try:
            schedule_check(candidate)
        except ValidationError as exc:
            self.add_error(None, exc)
        return cleaned


@admin.register(EvalSchedule)
class EvalScheduleAdmin(admin.ModelAdmin):
    form = EvalScheduleForm
    list_display = ("name", "dataset", "model_or_default", "when", "enabled", "baseline_policy", "last_run")
    list_filter = ("enabled", "baseline_policy")
    search_fields = ("name", "dataset", "experiment_file")
    readonly_fields = ("beat_entry", "runs_link", "last_error", "created_at", "updated_at")
    fieldsets = (
        (
            None,
            {"fields": ("name", "enabled", ("crontab", "interval"), "beat_entry", "runs_link", "last_error")},
        ),
        (
            "What to run (run_eval's options)",
            {
                "description": "A dataset and run_eval's options, or an experiment file "
                "(run_experiment's TOML, on the workers' filesystem) whose variants run instead.",
                "fields": (
                    "dataset",
                    "experiment_file",
                    "model",
                    ("limit", "concurrency", "max_steps", "epochs"),
                    "review",
                    ("celery", "queue"),
                    "judge_model",
                    "plugins",
                    ("split", "tags"),
                    ("cache", "cache_expiry", "cache_sampled"),
                ),
            },
        ),
        ("Comparison", {"fields": (("baseline_policy", "alpha"),)}),
        (None, {"fields": (("created_at", "updated_at"),)}),
    )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def get_queryset(self, request: HttpRequest) -> QuerySet[EvalSchedule]:
        return super().get_queryset(request).select_related("crontab", "interval", "periodic_task")

    def save_model(self, request: HttpRequest, obj: EvalSchedule, form: Any, change: bool) -> None:
        schedule_save(schedule=obj)

    def delete_model(self, request: HttpRequest, obj: EvalSchedule) -> None:
        schedule_delete(schedule=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[EvalSchedule]) -> None:
        for schedule in queryset:
            schedule_delete(schedule=schedule)

    @admin.display(description="model")
    def model_or_default(self, schedule: EvalSchedule) -> str:
        return schedule.model or "(configured)"

    @admin.display(description="when")
    def when(self, schedule: EvalSchedule) -> str:
        return str(schedule.crontab or schedule.interval or DASH)

    @admin.display(description="last run")
    def last_run(self, schedule: EvalSchedule) -> SafeString | str:
        run = Run.objects.filter(schedule=schedule).order_by("-created_at", "-pk").first()
        if run is None:
            return DASH
        return format_html("{} {}", admin_link(Run, run.pk, run.run_id), regression_badge(run))

    @admin.display(description="beat entry")
    def beat_entry(self, schedule: EvalSchedule) -> SafeString | str:
        task = schedule.periodic_task
        if task is None:
            return "none yet: saving the schedule writes it"
        return format_html("{} ({})", admin_link(task, task.pk, task.name), "on" if task.enabled else "off")

    @admin.display(description="runs")
    def runs_link(self, schedule: EvalSchedule) -> SafeString | str:
        if schedule.pk is None:
            return DASH
        return format_html(
            "{} · {}",
            admin_link(Run, None, "its runs", query=url_query(schedule__id__exact=schedule.pk)),
            admin_link(
                Run,
                None,
                "its regressions",
                query=url_query(schedule__id__exact=schedule.pk, regression="yes"),
            ),
        )
