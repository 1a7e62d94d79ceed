"""The run list and a run's page: its metrics, its config snapshot, and links
to its predictions and turns, pre-filtered by error, stop reason and status,
to its report with charts and to a comparison with the previous run on its
dataset (``evaluation.admin.report``, which also gives the list its
"Compare" action), and a scheduled run's regression flag
(``evaluation.admin.regressions``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, FloatField, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from common.admin import (
    DASH,
    StaffReadOnlyAdmin,
    admin_link,
    fmt_cost,
    fmt_ms,
    fmt_pct,
    html_table,
    json_block,
    subquery_count,
    url_query,
)
from evaluation.admin.regressions import RegressionFilter, regression_badge, regression_summary
from evaluation.admin.report import RunReportViews
from evaluation.metrics.intervals import accuracy_text, mean_text
from evaluation.models import Prediction, Run, RunStatus
from evaluation.run.prediction_export import predictions_csv_response
from evaluation.selectors import run_metrics
from turns.admin import status_badge
from turns.models import Turn


@admin.register(Run)
class RunAdmin(RunReportViews, StaffReadOnlyAdmin):
    list_display = (
        "run_id",
        # dataset and version in one column, the start as a short date: the
        # list fits a 1,280 px screen beside its filters (issue 49)
        "dataset_at_version",
        "status",
        # beside the status: the last columns scroll out of sight on a laptop screen
        "regression_flag",
        "experiment_variant",
        "model_name",
        "accuracy",
        "total",
        "errors",
        "started",
        "duration",
        # who started it is on the run's page: the list's last column was out of sight
    )
    list_select_related = ("dataset", "started_by", "experiment")
    list_filter = ("status", RegressionFilter, "schedule", "experiment", "dataset")
    date_hierarchy = "created_at"
    search_fields = ("run_id", "dataset__name")
    list_per_page = 50
    actions = (*RunReportViews.actions, "export_predictions_csv")  # type: ignore[assignment]  # the base holds a 1-tuple
    readonly_fields = (
        "run_id",
        "dataset",
        "dataset_version",
        "status",
        "model_name",
        "started_by",
        "system_user",
        "created_at",
        "finished_at",
        "duration",
        "browse",
        "report_links",
        "turns_by_status",
        "config_table",
        "config_json",
        "metrics_summary",
        "per_task_type",
        "epochs",
        "stop_reasons",
        "latency",
        "checks",
        "rescored_from",
        "schedule",
        "regression_summary",
        "experiment_variant",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("run_id", "status"),
                    ("dataset", "dataset_version", "model_name"),
                    ("started_by", "system_user"),
                    ("created_at", "finished_at", "duration"),
                    ("rescored_from", "experiment_variant"),
                    ("schedule", "regression_summary"),
                    "browse",
                    "report_links",
                    "turns_by_status",
                )
            },
        ),
        (
            "Metrics",
            {"fields": ("metrics_summary", "per_task_type", "epochs", "stop_reasons", "latency", "checks")},
        ),
        ("Config snapshot", {"fields": ("config_table", "config_json")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return (
            super()
            .get_queryset(request)
            .select_related("dataset", "started_by", "system_user", "schedule", "baseline", "experiment")
            .annotate(
                prediction_count=subquery_count(Prediction, "run_id"),
                error_count=subquery_count(Prediction, "run_id", error__gt=""),
                pending_count=subquery_count(Prediction, "run_id", completed_at__isnull=True),
                pending_error_count=subquery_count(
                    Prediction, "run_id", completed_at__isnull=True, error__gt=""
                ),
                model_name=KT("config__model"),
                accuracy_value=Cast(KT("metrics__accuracy"), FloatField()),
            )
        )

    # -- list columns --

    @admin.display(description="model", ordering="model_name")
    def model_name(self, run: Run) -> str:
        return str((run.config or {}).get("model") or DASH)

    @admin.display(description="variant", ordering="experiment__name")
    def experiment_variant(self, run: Run) -> SafeString | str:
        """The experiment and variant the run is, linked to the leaderboard."""
        if run.experiment is None:
            return DASH
        return admin_link(run.experiment, run.experiment.pk, f"{run.experiment.name} / {run.variant or DASH}")

    @admin.display(description="accuracy", ordering="accuracy_value")
    def accuracy(self, run: Run) -> str:
        metrics = run.metrics or {}
        if "accuracy" not in metrics:
            return DASH
        return accuracy_text(int(metrics.get("correct", 0)), int(metrics.get("scored", 0)))

    @admin.display(description="total", ordering="prediction_count")
    def total(self, run: Run) -> int:
        return run.prediction_count  # type: ignore[attr-defined]

    @admin.display(description="errors", ordering="error_count")
    def errors(self, run: Run) -> SafeString | int | str:
        """Errored examples; in a run still going, its examples not done yet
        are pending, not errors (their placeholder rows say "the turn did not
        finish" only so that a run cut off counts them wrong)."""
        count = run.error_count  # type: ignore[attr-defined]
        pending = 0
        if run.status == RunStatus.STARTED:
            pending = run.pending_count  # type: ignore[attr-defined]
            count -= run.pending_error_count  # type: ignore[attr-defined]
        if pending:
            return f"{count} ({pending} pending)"
        if not count:
            return 0
        return admin_link(Prediction, None, count, query=url_query(run__id__exact=run.pk, errored="yes"))

    @admin.display(description="started", ordering="created_at")
    def started(self, run: Run) -> str:
        return timezone.localtime(run.created_at).strftime("%Y-%m-%d %H:%M")

    @admin.display(description="dataset", ordering="dataset__name")
    def dataset_at_version(self, run: Run) -> str:
        return f"{run.dataset.name}@{run.dataset_version}"

    @admin.display(description="duration")
    def duration(self, run: Run) -> str:
        if run.finished_at is None:
            return "running" if run.status == "started" else DASH
        return fmt_ms((run.finished_at - run.created_at).total_seconds() * 1000)

    @admin.display(description="regression", ordering="regression")
    def regression_flag(self, run: Run) -> SafeString | str:
        return regression_badge(run)

    # -- detail page --

    @admin.display(description="regression vs baseline")
    def regression_summary(self, run: Run) -> SafeString:
        return regression_summary(run)

    def _metrics(self, run: Run) -> tuple[dict[str, Any], bool]:
        """The stored metrics, or — for a run that has not finished — computed now."""
        if run.metrics:
            return run.metrics, False
        return run_metrics(run=run), True

    @admin.display(description="browse")
    def browse(self, run: Run) -> SafeString:
        total, errors = run.prediction_count, run.error_count  # type: ignore[attr-defined]
        return format_html(
            "{} · {} · {} · {}",
            admin_link(Prediction, None, f"all {total} predictions", query=url_query(run__id__exact=run.pk)),
            admin_link(
                Prediction,
                None,
                f"{errors} with an error",
                query=url_query(run__id__exact=run.pk, errored="yes"),
            ),
            admin_link(
                Prediction, None, "wrong ones", query=url_query(run__id__exact=run.pk, correct__exact=0)
            ),
            admin_link(Turn, None, "its turns", query=url_query(run=run.pk)),
        )

    @admin.display(description="turns by status")
    def turns_by_status(self, run: Run) -> SafeString:
        counts = (
            Turn.objects.filter(pk__in=Prediction.objects.filter(run_id=run.pk).values("turn_id"))
            .order_by("status")
            .values("status")
            .annotate(n=Count("pk"))
        )
        rows = [
            (
                status_badge(row["status"]),
                admin_link(Turn, None, row["n"], query=url_query(run=run.pk, status__exact=row["status"])),
            )
            for row in counts
        ]
        return html_table(("status", "turns"), rows, empty="no turns")

    @admin.display(description="summary")
    def metrics_summary(self, run: Run) -> SafeString:
        metrics, live = self._metrics(run)
        tokens = metrics.get("tokens") or {}
        rows = [
            ("accuracy", accuracy_text(int(metrics.get("correct", 0)), int(metrics.get("scored", 0)))),
            *([("mean token F1", mean_text(metrics["f1"]))] if metrics.get("f1") else []),
            ("total", metrics.get("total", 0)),
            ("scored", metrics.get("scored", 0)),
            ("unscored", metrics.get("unscored", 0)),
            ("correct", metrics.get("correct", 0)),
            ("errors", metrics.get("errors", 0)),
            ("mean steps", DASH if metrics.get("steps_mean") is None else f"{metrics['steps_mean']:.2f}"),
            ("input tokens", f"{tokens.get('input', 0):,}"),
            ("output tokens", f"{tokens.get('output', 0):,}"),
            ("rows with unknown tokens", tokens.get("unknown_rows", 0)),
            ("cost", fmt_cost(metrics.get("cost"))),
        ]
        table = html_table(("metric", "value"), rows)
        if live:
            return format_html(
                "<p>{}</p>{}", "Computed now from the predictions: the run has not finished.", table
            )
        return table

    @admin.display(description="per task type")
    def per_task_type(self, run: Run) -> SafeString:
        metrics, _ = self._metrics(run)
        rows = [
            (
                admin_link(
                    Prediction, None, task_type, query=url_query(run__id__exact=run.pk, task_type=task_type)
                ),
                b.get("total", 0),
                b.get("scored", 0),
                b.get("correct", 0),
                accuracy_text(int(b.get("correct", 0)), int(b.get("scored", 0))),
            )
            for task_type, b in (metrics.get("per_task_type") or {}).items()
        ]
        return html_table(("task type", "total", "scored", "correct", "accuracy (95% CI)"), rows)

    @admin.display(description="epochs")
    def epochs(self, run: Run) -> SafeString | str:
        """Per task type and overall: mean accuracy over examples with its 95 %
        interval, pass@k, majority vote and disagreement (``metrics["epochs"]``)."""
        epochs = self._metrics(run)[0].get("epochs") or {}
        if not epochs:
            return "one epoch per example"
        k_max = int(epochs.get("epochs") or 1)
        buckets = [*(epochs.get("per_task_type") or {}).items(), ("all", epochs)]
        rows = [
            (
                label,
                b.get("scored_examples", 0),
                f"{fmt_pct(b.get('mean_accuracy'))} ("
                + ("–".join(fmt_pct(v) for v in b["mean_accuracy_ci"]) if b.get("mean_accuracy_ci") else DASH)
                + ")",
                *(fmt_pct((b.get("pass_at_k") or {}).get(str(k))) for k in range(1, k_max + 1)),
                fmt_pct(b.get("majority_accuracy")),
                fmt_pct(b.get("disagreement")),
            )
            for label, b in buckets
        ]
        head = (
            "task type",
            "examples",
            "mean accuracy (95% CI)",
            *(f"pass@{k}" for k in range(1, k_max + 1)),
        )
        return html_table((*head, "majority vote", "epochs disagree"), rows)

    @admin.display(description="stop reasons")
    def stop_reasons(self, run: Run) -> SafeString:
        metrics, _ = self._metrics(run)
        rows = [
            (
                reason or "(none)",
                admin_link(
                    Prediction, None, count, query=url_query(run__id__exact=run.pk, stop_reason=reason)
                ),
            )
            for reason, count in (metrics.get("stop_reasons") or {}).items()
        ]
        return html_table(("stop reason", "predictions"), rows)

    @admin.display(description="latency")
    def latency(self, run: Run) -> SafeString:
        metrics, _ = self._metrics(run)
        latency = metrics.get("latency_ms") or {}
        return html_table(
            ("p50", "p95", "mean"),
            [(fmt_ms(latency.get("p50")), fmt_ms(latency.get("p95")), fmt_ms(latency.get("mean")))],
        )

    @admin.display(description="plugins' checks")
    def checks(self, run: Run) -> SafeString:
        """Per check: how many steps or turns ran it, passed and failed, and
        the turns that failed it — a link to those predictions."""
        metrics, _ = self._metrics(run)
        rows = []
        for name, m in (metrics.get("checks") or {}).items():
            failing = url_query(run__id__exact=run.pk, failed_check=name)
            per_type = m.get("per_task_type") or {}
            buckets = [(name, m.get("scope", ""), m, failing)] + [
                (
                    f"· {task_type}",
                    "",
                    b,
                    url_query(run__id__exact=run.pk, failed_check=name, task_type=task_type),
                )
                for task_type, b in per_type.items()
                if len(per_type) > 1
            ]
            for label, scope, b, query in buckets:
                failed_turns = f"{b.get('turns_failed', 0)}/{b.get('turns', 0)}"
                rows.append(
                    (
                        label,
                        scope,
                        b.get("ran", 0),
                        b.get("passed", 0),
                        b.get("failed", 0),
                        fmt_pct(b.get("pass_rate")),
                        admin_link(Prediction, None, failed_turns, query=query)
                        if b.get("turns_failed")
                        else failed_turns,
                    )
                )
        return html_table(
            ("check", "scope", "ran", "passed", "failed", "pass rate", "turns failed"),
            rows,
            empty="no plugin checks in this run",
        )

    @admin.display(description="config")
    def config_table(self, run: Run) -> SafeString:
        config = {k: v for k, v in (run.config or {}).items() if k != "resumes"}
        rows = [
            (k, v if isinstance(v, str | int | float) else json_block(v)) for k, v in sorted(config.items())
        ]
        resumes = (run.config or {}).get("resumes") or []
        if resumes:
            rows.append(("resumed", format_html_join(", ", "{}", ((r.get("at", "?"),) for r in resumes))))
        return html_table(("setting", "value"), rows)

    @admin.display(description="raw config JSON")
    def config_json(self, run: Run) -> SafeString:
        return json_block(run.config)

    @admin.action(description="Export predictions (CSV)")
    def export_predictions_csv(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse:
        """One CSV of the selected runs' predictions, a ``run_id`` column telling them apart."""
        return predictions_csv_response(queryset)
