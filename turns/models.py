"""Conversations, turns, turn events and approvals (docs/architecture.md#the-data-model;
docs/architecture.md#the-turn-lifecycle; docs/architecture.md#the-event-log).

Models hold only what concerns their own fields; every write that changes a
turn's life goes through ``turns.services`` and every event through
``turns.events.event_append``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class HistoryMode(models.TextChoices):
    """What a turn of a conversation is given of the turns before it
    (``agentlab.agent.history``; docs/architecture.md#the-driver)."""

    #: their questions and answers
    ANSWERS = "answers"
    #: also their tool calls and results
    FULL = "full"


class Conversation(models.Model):
    """A chat thread owned by one user; its turns are answered in order, each
    given the ones before it (``history``: a ``HistoryMode``, empty for the
    ``AGENTLAB_CHAT_HISTORY`` setting)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True, default="")
    history = models.CharField(max_length=8, choices=HistoryMode.choices, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"


class TurnStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


class TurnOutcome(models.TextChoices):
    ANSWERED = "answered"
    ASKED = "asked"
    REJECTED = "rejected"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TurnPhase(models.TextChoices):
    #: the embedded model is being loaded before the first step (turns.driver)
    LOAD = "load"
    ACT = "act"
    REVIEW = "review"
    FINISH = "finish"


class TurnKind(models.TextChoices):
    CHAT = "chat"
    EVALUATION = "evaluation"
    #: a recorded turn driven again under a variant (``manage.py replay_turns``;
    #: ``Turn.replay_of`` is the original)
    REPLAY = "replay"


#: The longest question a chat turn takes, in characters (the API's limit and
#: the chat page's): a longer one is refused before anything is written.
MAX_QUESTION_CHARS = 20_000

TERMINAL_STATUSES = frozenset({TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED})
ACTIVE_STATUSES = frozenset({TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.WAITING})
RESUMABLE_STATUSES = frozenset({TurnStatus.INTERRUPTED, TurnStatus.FAILED})


class Turn(models.Model):
    """One question answered by one agent loop, run as a background job.

    ``last_seq`` is the seq of the newest event in the turn's log; it is only
    changed by ``turns.events.event_append`` under a row lock. ``usage`` is the
    ``UsageTotals.to_dict()`` shape (tokens, calls, unknown calls, cost, per
    model); ``timings`` holds milliseconds; ``meta`` holds the failure cause,
    the review and what the attempt started with (``turns.meta``); earlier
    attempts are ``TurnAttempt`` rows. ``context`` is what the tools may read (for evaluation,
    the example's documents). ``cancel_requested`` is the cancel flag the
    driver polls between steps and while waiting.
    """

    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.CASCADE, related_name="turns"
    )
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="turns")
    kind = models.CharField(max_length=16, choices=TurnKind.choices, default=TurnKind.CHAT)
    position = models.PositiveIntegerField(default=1)
    question = models.TextField()
    context = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=TurnStatus.choices, default=TurnStatus.QUEUED, db_index=True
    )
    phase = models.CharField(max_length=16, choices=TurnPhase.choices, blank=True, default="")
    outcome = models.CharField(max_length=16, choices=TurnOutcome.choices, blank=True, default="")
    answer = models.TextField(blank=True, default="")
    evidence = models.TextField(blank=True, default="")
    reasoning = models.TextField(blank=True, default="")
    clarifying_question = models.TextField(blank=True, default="")
    stop_reason = models.CharField(max_length=32, blank=True, default="", db_index=True)
    model = models.CharField(max_length=200, blank=True, default="")
    max_steps = models.PositiveIntegerField(default=6)
    #: the output-token limit of each LLM call of this turn; ``None``: the
    #: ``AGENTLAB_MAX_OUTPUT_TOKENS`` of the process that drives it
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    #: the agent loop's options beyond the columns above (an experiment's
    #: variant): ``system_prompt`` (replaces the default job description; a
    #: plugin's prompt still wins) and ``temperature``; ``{}``: the defaults.
    #: A side-by-side chat turn adds ``variant`` (its name) and its endpoint,
    #: ``model`` and ``base_url`` (``turns.jobs.run.turn_provider``)
    agent_options = models.JSONField(default=dict, blank=True)
    steps = models.PositiveIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    usage = models.JSONField(default=dict, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    #: the recorded turn this one replays (kind ``replay``); ``None`` for any other turn
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays"
    )
    last_seq = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    job_id = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="turn_status_heartbeat")]

    def __str__(self) -> str:
        return f"Turn {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    def can_resume(self) -> bool:
        return self.status in RESUMABLE_STATUSES


class AttemptReason(models.TextChoices):
    """Why an attempt of a turn started (``TurnAttempt.reason``), or — as
    ``TurnAttempt.ended_by`` — what ended it and started the next one."""

    #: the turn's first attempt
    FIRST = "first"
    #: a review's ``retry`` verdict (the driver, ``turns.driver.review``)
    REVIEW = "review"
    #: a person retried the turn (``turns.services.turn_retry``)
    RETRY = "retry"
    #: a person gave a ``max_steps`` turn more steps (``turns.services.turn_continue``)
    CONTINUE = "continue"


class TurnAttempt(models.Model):
    """One earlier attempt of a turn, archived when the next attempt started
    (docs/architecture.md#the-turn-lifecycle). The current attempt's values
    are on the ``Turn`` row (its ``ATTEMPT_COLUMNS``); a review retry, a
    person's retry or continue moves them into a row of this table
    (``turns.attempts.attempt_archive``, the one writer) and the next attempt
    starts from the columns' defaults.

    ``number`` is 1, 2, 3 … per turn; ``reason`` why it started (``first``,
    else what ended the attempt before it), ``ended_by`` what ended it
    (``AttemptReason``). ``first_seq``..``last_seq`` is its range
    in the turn's event log (the ``attempt.retry`` event that starts the next
    attempt is the next attempt's). ``usage`` is ``UsageTotals.to_dict()``,
    ``timings`` milliseconds (``{}`` for a review retry: the turn's timings run
    on). ``question`` and ``trace`` (``Step.to_dict()`` each) are a review
    retry's: what the attempt was asked and did; ``review`` the review's
    payload (``ReviewData``) when it had one; ``failure_cause`` /
    ``failure_error`` why it failed; ``max_steps`` its step limit.
    """

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    reason = models.CharField(max_length=16, choices=AttemptReason.choices, default=AttemptReason.FIRST)
    ended_by = models.CharField(max_length=16, choices=AttemptReason.choices)
    first_seq = models.PositiveIntegerField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=TurnStatus.choices)
    outcome = models.CharField(max_length=16, choices=TurnOutcome.choices, blank=True, default="")
    stop_reason = models.CharField(max_length=32, blank=True, default="")
    answer = models.TextField(blank=True, default="")
    evidence = models.TextField(blank=True, default="")
    reasoning = models.TextField(blank=True, default="")
    clarifying_question = models.TextField(blank=True, default="")
    question = models.TextField(blank=True, default="")
    steps = models.PositiveIntegerField(default=0)
    max_steps = models.PositiveIntegerField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    review = models.JSONField(null=True, blank=True)
    trace = models.JSONField(default=list, blank=True)
    failure_cause = models.TextField(null=True, blank=True)
    failure_error = models.TextField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["turn_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "number"], name="turnattempt_unique_turn_number"),
            models.CheckConstraint(condition=Q(number__gte=1), name="turnattempt_number_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.turn_id} attempt {self.number} ({self.status})"


class EventType(models.TextChoices):
    """The fixed set of event types (docs/architecture.md#the-event-log). Terminal types end a stream."""

    TURN_QUEUED = "turn.queued"
    TURN_STARTED = "turn.started"
    PHASE = "phase"
    THINKING = "thinking"
    #: coalesced text of a streaming completion (chat policy only)
    LLM_DELTA = "llm.delta"
    LLM_USAGE = "llm.usage"
    TOOL_CALL = "tool.call"
    #: written before a tool runs (idempotency after a crash)
    TOOL_STARTED = "tool.started"
    TOOL_RESULT = "tool.result"
    #: a plugin's verdict on a step or a turn (``agentlab.agent.plugins``)
    CHECK = "check"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_RESOLVED = "approval.resolved"
    REVIEW = "review"
    ATTEMPT_RETRY = "attempt.retry"
    TURN_ANSWERED = "turn.answered"
    TURN_ASKED = "turn.asked"
    TURN_FAILED = "turn.failed"
    TURN_CANCELLED = "turn.cancelled"
    TURN_INTERRUPTED = "turn.interrupted"
    TURN_RESUMED = "turn.resumed"
    #: what the turn was given of its conversation, before its first LLM call
    HISTORY = "history"
    #: a replay's new agent first left the recorded path (``agentlab.agent.replay``)
    REPLAY_DIVERGENCE = "replay.divergence"


TERMINAL_EVENT_TYPES = frozenset(
    {EventType.TURN_ANSWERED, EventType.TURN_ASKED, EventType.TURN_FAILED, EventType.TURN_CANCELLED}
)


class TurnEvent(models.Model):
    """One entry of a turn's append-only event log; ``seq`` is 1, 2, 3 … per turn."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=32, choices=EventType.choices)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["turn_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "seq"], name="turnevent_unique_turn_seq"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="turnevent_seq_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.turn_id}#{self.seq} {self.type}"

    def as_frame(self) -> dict[str, object]:
        """The event's wire shape (docs/architecture.md#the-event-log): ``{"seq", "type", "data", "at"}``."""
        return {"seq": self.seq, "type": self.type, "data": self.data, "at": self.created_at.isoformat()}


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class Approval(models.Model):
    """A tool call waiting for a human decision; exactly one decision counts."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="approvals")
    tool_call = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Approval {self.pk} ({self.status})"


class FeedbackRating(models.TextChoices):
    UP = "up"
    DOWN = "down"


class TurnFeedback(models.Model):
    """An end user's rating of an answered chat turn: thumbs ``up`` or
    ``down`` and an optional comment (what LangSmith and Langfuse call
    feedback). One current rating per user and turn; a changed rating is a
    new row and the one before is kept with ``current=False`` (its history)."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    rating = models.CharField(max_length=8, choices=FeedbackRating.choices)
    comment = models.TextField(blank=True, default="")
    current = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["turn", "user"], condition=Q(current=True), name="turnfeedback_one_current_per_user"
            ),
            models.CheckConstraint(condition=Q(rating__in=["up", "down"]), name="turnfeedback_rating_valid"),
        ]

    def __str__(self) -> str:
        return f"turn {self.turn_id}: {self.rating}"


class LLMCacheEntry(models.Model):
    """One cached LLM completion (``agentlab.agent.providers.caching``;
    docs/evaluating.md#caching-llm-calls), shared by every process that
    reads this database — in-process runs and Celery workers alike.

    ``key``: SHA-256 hex of the request's canonical JSON, unique (two
    concurrent misses store one entry); ``request``: that JSON, for
    inspection; ``completion``: ``Completion.to_dict()`` as first returned;
    ``expires_at``: ``None`` never expires."""

    key = models.CharField(max_length=64, unique=True)
    model = models.CharField(max_length=200, db_index=True)
    request = models.JSONField()
    completion = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.model}: {self.key[:12]}"
