"""The replays' models (issue 42; docs/evaluating.md#replaying-recorded-turns):
recorded turns driven again under a variant, each a new turn of kind
``replay`` linked to its original. Re-exported by ``evaluation.models``; the
run, prediction and turns are named by their app label so this module
imports no other model module."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ReplayStatus(models.TextChoices):
    STARTED = "started"
    SUCCESS = "success"


class Replay(models.Model):
    """One ``manage.py replay_turns``: which recorded turns (``source_run``'s
    predictions, or chat turns by ``selection``'s filters), under which
    ``variant`` (its options, a prompt file read into its text), with which
    argument rule (``args_match``) and whether the turns go on live with
    read-only tools after their divergence (``live``). ``name`` resumes it.
    ``summary``: the figures of its last finish (``evaluation.replay.verdicts``).
    Its turns are owned by ``system_user``."""

    name = models.CharField(max_length=200, unique=True)
    source_run = models.ForeignKey(
        "evaluation.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays"
    )
    #: ``{"run": run id}`` or ``{"turns": {filters}}``, with ``sample`` and ``seed``
    selection = models.JSONField(default=dict, blank=True)
    variant = models.JSONField(default=dict, blank=True)
    args_match = models.CharField(max_length=16, default="exact")
    live = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=ReplayStatus.choices, default=ReplayStatus.STARTED)
    summary = models.JSONField(default=dict, blank=True)
    system_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name


class ReplayVerdict(models.TextChoices):
    """How a replayed turn compares with its original."""

    #: the same path of tool calls and the same answer
    IDENTICAL = "identical"
    #: the new agent left the recorded path (``ReplayItem.divergence_step``)
    DIVERGED = "diverged"
    #: the same path, another answer
    NEW_ANSWER = "new_answer"


class ReplayItem(models.Model):
    """One recorded turn of a replay: the ``original`` and its new ``turn``
    (kind ``replay``), side by side. Written with the new turn (pessimistic:
    no verdict) and completed when it ends (``completed_at``): the
    ``verdict``, the 1-based ``divergence_step`` in the recorded path of
    tool calls, and — when the original was a scored prediction
    (``original_prediction``) — the new answer scored by the same ``scorer``
    (``correct``, ``score``) beside the original's (``original_correct``)."""

    replay = models.ForeignKey(Replay, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    original = models.ForeignKey("turns.Turn", on_delete=models.CASCADE, related_name="+")
    turn = models.OneToOneField("turns.Turn", on_delete=models.CASCADE, related_name="replay_item")
    original_prediction = models.ForeignKey(
        "evaluation.Prediction", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    verdict = models.CharField(max_length=16, choices=ReplayVerdict.choices, blank=True, default="")
    divergence_step = models.PositiveIntegerField(null=True, blank=True)
    scorer = models.CharField(max_length=32, blank=True, default="")
    original_correct = models.BooleanField(null=True, blank=True)
    correct = models.BooleanField(null=True, blank=True)
    score = models.FloatField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["replay_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["replay", "original"], name="replay_item_unique_original"),
        ]

    def __str__(self) -> str:
        return f"{self.replay_id}/{self.position}"
