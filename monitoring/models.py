"""Online evaluators and their scores (docs/monitoring.md#online-evaluators)."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django_celery_beat.models import PeriodicTask

from turns.models import Turn, TurnOutcome


class Window(models.TextChoices):
    """The period the trend and the alert count scores over."""

    HOURLY = "hourly", "hourly"
    DAILY = "daily", "daily"


class OnlineEvaluator(models.Model):
    """Scores a sample of finished chat turns with reference-free scorers.

    Sampling: a turn is scored when ``sampling_rate`` (0–1) exceeds a hash of
    (evaluator, turn) mapped to [0, 1) — the same decision on every delivery
    (``monitoring.sampling``). Filters (blank: any): the conversation owner's
    ``owner_group``, a ``tool`` the turn called, the turn's ``outcome``.
    Scorers (at least one): ``score_answered`` (passes when the turn
    answered; its label is the outcome: answered, asked, failed …),
    ``max_steps`` (passes at or under that many steps), ``max_latency_ms``
    (passes at or under that latency), ``checks_plugin`` (passes when every
    ``check`` event of that plugin passed; ``*``: of any plugin), ``judge``
    (the LLM judge with ``judge_rubric`` and no gold answer; ``judge_model``
    blank: the configured model). A turn passes when all its scorers pass.

    Trend and alert: scores are counted per ``window``; the beat entry
    (``periodic_task``, written by ``monitoring.sync``) compares the last
    complete window with the one before and flags the evaluator on a drop
    significant at ``alpha``, when both windows hold ``min_count`` scores."""

    name = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True)
    sampling_rate = models.FloatField(
        default=0.1, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)], help_text="0–1"
    )
    owner_group = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="only turns whose owner is in this group (blank: any owner)",
    )
    tool = models.CharField(
        max_length=200, blank=True, default="", help_text="only turns that called this tool (blank: any)"
    )
    outcome = models.CharField(
        max_length=16,
        blank=True,
        default="",
        choices=TurnOutcome.choices,
        help_text="only turns with this outcome (blank: any)",
    )
    score_answered = models.BooleanField(
        default=True, help_text="built-in: passes when the turn answered (not asked, failed …)"
    )
    max_steps = models.PositiveIntegerField(
        null=True, blank=True, help_text="built-in: passes at or under this many steps"
    )
    max_latency_ms = models.PositiveIntegerField(
        null=True, blank=True, help_text="built-in: passes at or under this latency (ms)"
    )
    checks_plugin = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="a plugin's checks: passes when all its check events passed (* any plugin)",
    )
    judge = models.BooleanField(default=False, help_text="the LLM judge, with the rubric and no gold answer")
    judge_rubric = models.TextField(blank=True, default="")
    judge_model = models.CharField(max_length=200, blank=True, default="")
    window = models.CharField(max_length=8, choices=Window.choices, default=Window.DAILY)
    min_count = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1)], help_text="fewer scores in a window: no alert"
    )
    alpha = models.FloatField(default=0.05, validators=[MinValueValidator(0.0001), MaxValueValidator(0.5)])
    flagged = models.BooleanField(default=False)
    flagged_at = models.DateTimeField(null=True, blank=True, editable=False)
    flag_reason = models.TextField(blank=True, default="", editable=False)
    #: the start of the last window compared (each window is compared once)
    last_checked_window = models.DateTimeField(null=True, blank=True, editable=False)
    last_check = models.TextField(blank=True, default="", editable=False)
    periodic_task = models.OneToOneField(
        PeriodicTask, null=True, blank=True, editable=False, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """At least one scorer; a judge rubric or model only with the judge."""
        if not self.scorer_names():
            raise ValidationError(
                "choose at least one scorer: answered, a steps or latency bound, "
                "a plugin's checks or the judge"
            )
        if not self.judge and (self.judge_rubric.strip() or self.judge_model.strip()):
            raise ValidationError(
                {"judge": "a judge rubric or model is set: turn the judge on, or clear them"}
            )

    def scorer_names(self) -> list[str]:
        """The scorers this evaluator runs, in order: ``answered``, ``steps``,
        ``latency``, ``checks``, ``judge``."""
        chosen = [
            ("answered", self.score_answered),
            ("steps", self.max_steps is not None),
            ("latency", self.max_latency_ms is not None),
            ("checks", bool(self.checks_plugin.strip())),
            ("judge", self.judge),
        ]
        return [name for name, on in chosen if on]


class OnlineScore(models.Model):
    """One evaluator's score of one turn (unique per (turn, evaluator)).

    ``value``: the mean of the scorers' values in [0, 1] (``None``: no
    scorer could score, e.g. the judge failed); ``passed``: every scorer
    passed (``None`` when unscored); ``label``: the turn's outcome;
    ``details``: per scorer ``{"value", "passed", "explanation"}``;
    ``usage``: the judge's calls under role ``judge`` (``{}`` without a
    judge call), apart from the turn's own ``usage``; ``turn_finished_at``:
    the turn's end, the time the trend windows count by."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="online_scores")
    evaluator = models.ForeignKey(OnlineEvaluator, on_delete=models.CASCADE, related_name="scores")
    value = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True, blank=True)
    label = models.CharField(max_length=16, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    turn_finished_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-turn_finished_at"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "evaluator"], name="onlinescore_unique_turn_evaluator"),
        ]
        indexes = [models.Index(fields=["evaluator", "turn_finished_at"], name="onlinescore_eval_time")]

    def __str__(self) -> str:
        return f"{self.evaluator} · turn {self.turn_id}: {self.value}"
