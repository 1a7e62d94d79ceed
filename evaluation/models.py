"""Datasets, examples, evaluation runs and predictions (docs/architecture.md#the-data-model;
docs/architecture.md#evaluation-semantics)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

# the annotation queues' models: a module of their own (re-exported here)
from evaluation.annotation_models import AnnotationQueue as AnnotationQueue
from evaluation.annotation_models import HumanLabel as HumanLabel
from evaluation.annotation_models import QueueItem as QueueItem
from evaluation.annotation_models import default_label_set as default_label_set

# the replays' models (issue 42): a module of their own (re-exported here)
from evaluation.replay_models import Replay as Replay
from evaluation.replay_models import ReplayItem as ReplayItem
from evaluation.replay_models import ReplayStatus as ReplayStatus
from evaluation.replay_models import ReplayVerdict as ReplayVerdict


class Dataset(models.Model):
    """A named set of examples, imported from a JSONL file or written by the project."""

    name = models.CharField(max_length=200, unique=True)
    source = models.CharField(max_length=500, blank=True, default="")
    #: entry-point plugins every run of the dataset switches on (``import_dataset --plugin``)
    plugins = models.JSONField(default=list, blank=True)
    #: the scorer of examples that name none (``""``: by task type), e.g. ``judge``
    scorer = models.CharField(max_length=32, blank=True, default="")
    #: the judge's rubric for the dataset's examples (``""``: the default
    #: rubric); an example's ``rubric`` metadata wins
    rubric = models.TextField(blank=True, default="")
    #: the number of the dataset's latest version (``DatasetVersion.number``)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class DatasetVersion(models.Model):
    """One version of a dataset's examples (docs/architecture.md#dataset-versions).

    Every change to the examples — an import with different content, an
    edit or removal in the admin, examples added from chat turns — makes the
    next ``number`` (1, 2, 3, …). The example rows themselves say which
    versions they belong to (``Example.valid_from`` / ``valid_to``); this row
    records when, by whom, from what (``source``) and the counts, measured
    against the version before."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    #: what made the version: ``import /path/file.jsonl``, ``admin: …``, ``chat turns 12, 15``
    source = models.CharField(max_length=500, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    added = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    removed = models.PositiveIntegerField(default=0)
    #: the examples in this version
    total = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["dataset_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="dataset_version_unique_number"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset_id}@{self.number}"


class Example(models.Model):
    """One question with its gold answer. ``scorer`` empty means: by task type.

    ``answer`` is JSON: a string, or a list of alias strings any one of which
    is correct (``evaluation.datasets.jsonl.gold_answer``).

    A row is one content of example ``external_id`` (its ``question_id``),
    valid from dataset version ``valid_from`` up to, not including,
    ``valid_to`` (``None``: still current). A change never updates a row's
    content: it closes the row (``valid_to``) and adds one, so unchanged
    examples are shared by every version and predictions keep pointing at
    what they answered (``evaluation.datasets.versions``)."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="examples")
    external_id = models.CharField(max_length=200)
    position = models.PositiveIntegerField(default=0)
    question = models.TextField()
    answer = models.JSONField(default=str)
    task_type = models.CharField(max_length=64, db_index=True)
    scorer = models.CharField(max_length=32, blank=True, default="")
    choices = models.JSONField(null=True, blank=True)
    context = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    #: entry-point plugins the example's own line switches on (its ``plugins`` field)
    plugins = models.JSONField(default=list, blank=True)
    #: the first dataset version holding this content
    valid_from = models.PositiveIntegerField(default=1)
    #: the version that changed or removed it (``None``: current)
    valid_to = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["dataset_id", "position", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "external_id", "valid_from"], name="example_unique_dataset_id_version"
            ),
            models.UniqueConstraint(
                fields=["dataset", "external_id"],
                condition=Q(valid_to__isnull=True),
                name="example_unique_current_dataset_external_id",
            ),
        ]
        indexes = [models.Index(fields=["dataset", "valid_to"], name="example_dataset_valid_to")]

    def __str__(self) -> str:
        return self.external_id


class BaselinePolicy(models.TextChoices):
    """What a scheduled run is compared with."""

    PREVIOUS = "previous", "the previous successful run of this schedule"
    NONE = "none", "no comparison"


class EvalSchedule(models.Model):
    """An evaluation that Celery beat runs on a crontab or interval (issue 17).

    The options are ``run_eval``'s (``evaluation.run.request``): blank or
    ``None`` means the command's default. ``crontab`` or ``interval`` (exactly
    one) is django-celery-beat's own schedule row; ``periodic_task`` is the
    beat entry that fires ``evaluation.schedules.firing.scheduled_eval_run``
    with ``{"schedule_id": pk}`` — written only by
    ``evaluation.schedules.sync`` (never edit it by hand: saving the schedule
    rewrites it). ``last_error``: why the latest firing did not produce a
    run, ``""`` when it did."""

    name = models.CharField(max_length=100, unique=True)
    #: a registered dataset name (``manage.py import_dataset``) or ``demo``;
    #: blank with ``experiment_file``
    dataset = models.CharField(max_length=200, blank=True, default="")
    #: an experiment file (TOML, ``run_experiment``'s) on the workers'
    #: filesystem: when set the schedule runs it — its dataset, options and
    #: variants — instead of ``run_eval``, and each variant's run is compared
    #: with that variant's previous run of the schedule
    experiment_file = models.CharField(max_length=500, blank=True, default="")
    #: a model name at the endpoint or a GGUF path; blank: the configured one
    model = models.CharField(max_length=200, blank=True, default="")
    limit = models.PositiveIntegerField(null=True, blank=True)
    concurrency = models.PositiveIntegerField(default=4)
    #: blank: ``AGENTLAB_MAX_STEPS``
    max_steps = models.PositiveIntegerField(null=True, blank=True)
    #: blank: 1
    epochs = models.PositiveIntegerField(null=True, blank=True)
    review = models.BooleanField(default=True)
    celery = models.BooleanField(default=False)
    #: with ``celery``: the queue the examples' turns go to (blank:
    #: ``AGENTLAB_EVAL_QUEUE``, else Celery's default queue)
    queue = models.CharField(max_length=200, blank=True, default="")
    judge_model = models.CharField(max_length=200, blank=True, default="")
    #: entry-point plugin names, comma-separated (``--plugin``)
    plugins = models.CharField(max_length=500, blank=True, default="")
    #: ``--split``: only the examples of this split; blank: every split
    #: (docs/evaluating.md#splits-and-tags; an experiment file names its own)
    split = models.CharField(max_length=100, blank=True, default="")
    #: ``--tag``, comma-separated: only the examples carrying every one; blank: no filter
    tags = models.CharField(max_length=500, blank=True, default="")
    #: ``--cache``: serve repeated LLM calls from the LLM-call cache
    #: (docs/evaluating.md#caching-llm-calls); an experiment file says ``cache`` itself
    cache = models.BooleanField(default=False, help_text="serve repeated LLM calls from the LLM-call cache")
    #: ``--cache-expiry`` (``7d``, ``12h``, ``30m``); blank: entries never expire
    cache_expiry = models.CharField(max_length=20, blank=True, default="")
    #: ``--cache-sampled``: serve sampled calls (temperature > 0, no seed) too
    cache_sampled = models.BooleanField(default=False)
    baseline_policy = models.CharField(
        max_length=16, choices=BaselinePolicy.choices, default=BaselinePolicy.PREVIOUS
    )
    alpha = models.FloatField(default=0.05)
    enabled = models.BooleanField(default=True)
    crontab = models.ForeignKey(
        CrontabSchedule, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    interval = models.ForeignKey(
        IntervalSchedule, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    periodic_task = models.OneToOneField(
        PeriodicTask, null=True, blank=True, editable=False, on_delete=models.SET_NULL, related_name="+"
    )
    last_error = models.TextField(blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def plugin_names(self) -> list[str]:
        """``plugins`` as a list of names, blanks dropped."""
        return [name.strip() for name in self.plugins.split(",") if name.strip()]

    @property
    def tag_names(self) -> list[str]:
        """``tags`` as a list of names, blanks dropped."""
        return [name.strip() for name in self.tags.split(",") if name.strip()]


class Experiment(models.Model):
    """One dataset, many variants of the agent, each a run (``manage.py
    run_experiment FILE.toml``; docs/architecture.md#experiments).

    ``name`` is the file's ``name``; ``slug`` the run-id prefix made from it
    (``evaluation.experiments.experiment_file.slug``): a variant's run id is
    ``<slug>.<variant slug>``. ``dataset_version``: the version every
    variant runs on, fixed by the first run (a variant added later runs on it
    too). ``spec``: the file's shared options and variants as last run
    (``ExperimentSpec.to_dict``); a variant's own options are also in its
    run's ``config["variant"]``. ``baseline``: the variant
    ``--fail-on-regression`` gates the others against (``""``: none);
    ``alpha``: the leaderboard's significance level."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.CharField(max_length=100, unique=True)
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="experiments")
    dataset_version = models.PositiveIntegerField(default=1)
    spec = models.JSONField(default=dict, blank=True)
    baseline = models.CharField(max_length=100, blank=True, default="")
    alpha = models.FloatField(default=0.05)
    #: the file it was last run from, as given on the command line
    source = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.CheckConstraint(condition=~Q(slug=""), name="experiment_slug_not_empty")]

    def __str__(self) -> str:
        return self.name


class RunStatus(models.TextChoices):
    STARTED = "started"
    SUCCESS = "success"
    CANCELLED = "cancelled"
    ERROR = "error"


class Run(models.Model):
    """One evaluation run over a dataset. ``config`` snapshots provider, model,
    agent settings and code version; ``metrics`` is ``compute_metrics`` output."""

    run_id = models.CharField(max_length=200, unique=True)
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="runs")
    #: the dataset version the run is on (kept when it is resumed)
    dataset_version = models.PositiveIntegerField(default=1)
    status = models.CharField(
        max_length=16, choices=RunStatus.choices, default=RunStatus.STARTED, db_index=True
    )
    config = models.JSONField(default=dict, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    system_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: the lease of the ``run_eval`` process driving the run (``""``: none):
    #: its job tag (``turns.jobs.ids.local_job_id``) and when it last said it is
    #: alive; ``run_start`` refuses a run whose lease is live
    driver = models.CharField(max_length=64, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    #: the run whose stored predictions this run scored again (``manage.py
    #: rescore``), ``None`` for a run that drove its own turns
    rescored_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="rescores"
    )
    #: the schedule that fired the run (``None``: started by hand)
    schedule = models.ForeignKey(
        EvalSchedule, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    #: whether the comparison with ``baseline`` found a significant regression;
    #: ``None``: not compared (no baseline, or the run did not succeed)
    regression = models.BooleanField(null=True, blank=True, db_index=True)
    baseline = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    #: the significant regressions against ``baseline``, one line each
    #: (``evaluation.compare.pairing.regressions``); ``[]`` when none or not compared
    regressions = models.JSONField(default=list, blank=True)
    #: the experiment the run is a variant of (``None``: a plain run) and the
    #: variant's name in it
    experiment = models.ForeignKey(
        Experiment, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    variant = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=~Q(run_id=""), name="run_run_id_not_empty"),
        ]

    def __str__(self) -> str:
        return self.run_id


class Prediction(models.Model):
    """The result of one example in one run; written even when the turn errors.

    A row is created with pessimistic defaults (stop reason ``error``, wrong)
    when the example's turn is created, and completed when the turn ends
    (``completed_at`` set). ``correct``/``score`` are ``None`` when the example
    could not be scored — not the same as wrong.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="predictions")
    example = models.ForeignKey(Example, on_delete=models.CASCADE, related_name="predictions")
    turn = models.ForeignKey(
        "turns.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="predictions"
    )
    task_type = models.CharField(max_length=64, db_index=True)
    prediction = models.TextField(blank=True, default="")
    #: the example's gold answer when the row was planned: a string or a list of aliases
    gold_answer = models.JSONField(blank=True, default=str)
    scorer = models.CharField(max_length=32, blank=True, default="")
    score = models.FloatField(null=True, blank=True)
    correct = models.BooleanField(null=True, blank=True)
    evidence = models.TextField(blank=True, default="")
    reasoning = models.TextField(blank=True, default="")
    steps = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cost = models.FloatField(null=True, blank=True)
    stop_reason = models.CharField(max_length=32, default="error", db_index=True)
    error = models.TextField(blank=True, default="")
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    #: whether the first attempt's answer was correct (``None``: unscored or
    #: not completed); equals ``correct`` when no review retry happened
    first_correct = models.BooleanField(null=True, blank=True)
    #: whether a review asked for, and got, a retry (``None``: not completed)
    review_retried = models.BooleanField(null=True, blank=True)
    #: the verdict of the turn's last review — ``accept``, ``retry``,
    #: ``cannot_judge`` or ``failed`` (the reviewer gave no verdict) — or
    #: ``""`` when nothing was reviewed (review off, no answer, a late review)
    review_verdict = models.CharField(max_length=16, blank=True, default="")
    #: the turn's usage over all its attempts, agent and review calls labelled
    #: (``UsageTotals.to_dict()``: by model, by role, cost): the same figures
    #: the chat page, the API and the admin show for that turn
    usage = models.JSONField(blank=True, default=dict)
    #: how the final answer's JSON type did not fit what the scorer reads
    #: (``"object where text was expected"``), ``""`` when it fit; the answer
    #: was still scored, as its JSON text
    answer_mismatch = models.CharField(max_length=200, blank=True, default="")
    #: which attempt at the example this is (1..K with ``run_eval --epochs K``)
    epoch = models.PositiveIntegerField(default=1)
    #: what the scorer said it compared, or why it could not score
    score_explanation = models.TextField(blank=True, default="")
    #: the LLM judge's grading (``evaluation.judge.grader.Judgement``:
    #: model, grade, cached, usage of its call), ``{}`` for other scorers
    judgement = models.JSONField(blank=True, default=dict)
    #: the path's verdicts beside the answer's (``evaluation.run.trajectory_pass``); ``{}``: none
    trajectory_scores = models.JSONField(blank=True, default=dict)
    #: a conversation example's conversation (``None``: a one-question example),
    #: owned by the run's system user; ``turn`` is then its latest turn
    conversation = models.ForeignKey(
        "turns.Conversation", null=True, blank=True, on_delete=models.SET_NULL, related_name="predictions"
    )
    #: a conversation example's per-turn scores and how it ended
    #: (``evaluation.run.conversation_score.ConversationResult``); ``{}``: a one-question example
    conversation_result = models.JSONField(blank=True, default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "example__position", "epoch"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "example", "epoch"], name="prediction_unique_run_example_epoch"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.example_id}" + (f"#{self.epoch}" if self.epoch != 1 else "")


class JudgeCacheEntry(models.Model):
    """One LLM judge's grade, cached: re-scoring the same (question,
    prediction text, gold, rubric, judge model) does not call the judge again.

    ``key`` is ``evaluation.judge.grader.JudgeRequest.cache_key()`` (SHA-256
    hex of those five values); only readable grades are cached — a judge
    error or an unreadable grade is asked again next time."""

    key = models.CharField(max_length=64, unique=True)
    model = models.CharField(max_length=200)
    grade = models.CharField(max_length=16)
    value = models.FloatField()
    explanation = models.TextField(blank=True, default="")
    #: the judge call's usage (``UsageTotals.to_dict()``, role ``judge``)
    usage = models.JSONField(blank=True, default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.model}: {self.grade}"
