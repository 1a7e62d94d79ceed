"""The annotation queues' models (issues 30 and 45; docs/architecture.md#annotation-queues):
a queue over a run's predictions (single or pairwise) or over chat turns
rated by end users, its items and the reviewers' labels. Re-exported by
``evaluation.models``; the run, prediction and turn are named by their app
label so this module imports no other model module."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


def default_label_set() -> list[str]:
    return ["correct", "partial", "incorrect"]


class AnnotationQueue(models.Model):
    """Predictions of ``run`` to label (docs/architecture.md#annotation-queues); ``pairwise``: each
    item pairs ``run``'s and ``other_run``'s answers to one example. ``overlap``: reviewers per item.
    ``turns``: chat turns rated thumbs down (no ``run``), whose corrected answers become examples
    of dataset ``dataset_name`` with ``task_type``; ``since``: the ratings' earliest time."""

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, default="single")
    run = models.ForeignKey(
        "evaluation.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="annotation_queues"
    )
    other_run = models.ForeignKey(
        "evaluation.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    filter = models.CharField(max_length=16, default="all")
    sample = models.PositiveIntegerField(null=True, blank=True)
    seed = models.IntegerField(null=True, blank=True)
    overlap = models.PositiveIntegerField(default=1)
    label_set = models.JSONField(default=default_label_set)
    instructions = models.TextField(blank=True, default="")
    tag_set = models.JSONField(default=list, blank=True)
    label_map = models.JSONField(default=dict, blank=True, help_text="own label → correct/partial/incorrect")
    dataset_name = models.CharField(max_length=200, blank=True, default="")
    task_type = models.CharField(max_length=64, blank=True, default="")
    since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind="turns", run__isnull=True) | (~Q(kind="turns") & Q(run__isnull=False)),
                name="annotation_queue_run_unless_turns",
            )
        ]

    def __str__(self) -> str:
        return self.name


class QueueItem(models.Model):
    """A queue's item, held by ``claimed_by`` until ``claimed_until``; ``swapped``: other on the left.
    It is either a ``prediction`` (run queues) or a chat ``turn`` (feedback queues), never both."""

    queue = models.ForeignKey(AnnotationQueue, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    prediction = models.ForeignKey(
        "evaluation.Prediction", null=True, blank=True, on_delete=models.CASCADE, related_name="queue_items"
    )
    turn = models.ForeignKey(
        "turns.Turn", null=True, blank=True, on_delete=models.CASCADE, related_name="queue_items"
    )
    other_prediction = models.ForeignKey(
        "evaluation.Prediction", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    swapped = models.BooleanField(default=False)
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claimed_until = models.DateTimeField(null=True, blank=True)
    label_count = models.PositiveIntegerField(default=0, help_text="current labels: the claim's overlap test")

    class Meta:
        ordering = ["queue_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "position"], name="queue_item_position"),
            models.CheckConstraint(
                condition=Q(prediction__isnull=False, turn__isnull=True)
                | Q(prediction__isnull=True, turn__isnull=False),
                name="queue_item_prediction_xor_turn",
            ),
        ]


class HumanLabel(models.Model):
    """A reviewer's label of an item; a change adds a row and sets the old one's ``current`` False."""

    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="labels")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    label = models.CharField(max_length=32)
    tags = models.JSONField(default=list, blank=True)
    note = models.TextField(blank=True, default="")
    corrected_answer = models.TextField(blank=True, default="")
    current = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["item_id", "created_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["item", "reviewer"], condition=Q(current=True), name="human_label_one_current"
            )
        ]
