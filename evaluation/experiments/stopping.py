"""``run_experiment --stop-when-decided``: drive an experiment's variants in
rounds of ``batch_size`` examples and stop once its top group is decided
(issue 43; docs/comparing.md#stopping-early).

Round ``r`` drives every variant on the first ``r · batch_size`` examples of
the dataset, in the dataset's order, the same examples for every variant
(each round is ``runner._drive`` at a larger ``limit``: the examples of the
earlier rounds are done and skipped, so a round drives only its batch, and
no prediction row exists for an example no round reached). After each round,
every pair of variants gets the Waudby-Smith & Ramdas (2023) confidence
sequence of its paired difference in accuracy (``sequential.decide``, at the
experiment's ``alpha`` divided by the number of pairs — Bonferroni — so the
decisions hold together); the experiment stops when every pair of the leader
(the variant with the highest accuracy so far) is decided — its interval
excludes 0, or lies inside ±``margin`` — or when the data runs out.

The examples not reached are **not run**: they have no prediction, so they
count neither in a run's accuracy nor in a paired comparison; each run's
``limit`` is the examples reached, and a later ``run_experiment FILE``
without the flag resumes every run and drives the rest. The record of the
stop (``experiment.spec["stopped_early"]``) says at how many examples it stopped and each
pair's decision; the leaderboard shows it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from common.errors import BadInput
from evaluation.datasets.versions import examples_at
from evaluation.experiments.experiment_file import ExperimentSpec
from evaluation.models import Experiment, Prediction, Run

if TYPE_CHECKING:  # numpy: imported where the sequence is computed, never at start-up
    from evaluation.experiments.sequential import Decision

#: The examples per round when neither ``--batch-size`` nor ``batch_size`` is given.
DEFAULT_BATCH = 20
#: The equivalence margin (accuracy, 0..1) when neither ``--margin`` nor ``margin`` is given.
DEFAULT_MARGIN = 0.05


@dataclass(frozen=True)
class StopRule:
    """How an experiment stops early: ``margin`` (a difference in accuracy
    in (0, 1) within which two variants count as equivalent) and ``batch``
    (examples per round, ≥ 1)."""

    margin: float = DEFAULT_MARGIN
    batch: int = DEFAULT_BATCH


def stop_rule(
    spec: ExperimentSpec, *, flag: bool = False, margin: float | None = None, batch: int | None = None
) -> StopRule | None:
    """The experiment's ``StopRule`` — ``None`` when neither ``flag``
    (``--stop-when-decided``) nor the file's ``stop_when_decided = true``
    asks for one. A command-line ``margin``/``batch`` wins over the file's
    ``margin``/``batch_size``. Raises ``BadInput`` naming the option for a
    margin outside (0, 1) or a batch below 1 (given without the flag, too)."""
    shared = spec.shared
    file_margin, file_batch = shared.get("margin"), shared.get("batch_size")
    chosen_margin = margin if margin is not None else file_margin
    chosen_batch = batch if batch is not None else file_batch
    if chosen_margin is not None and not 0 < float(chosen_margin) < 1:
        where = "--margin" if margin is not None else f"{spec.path}: margin"
        raise BadInput(f"{where} must be a difference in accuracy in (0, 1), e.g. 0.05; got {chosen_margin}")
    if chosen_batch is not None and int(chosen_batch) < 1:
        where = "--batch-size" if batch is not None else f"{spec.path}: batch_size"
        raise BadInput(f"{where} must be at least 1 example per round; got {chosen_batch}")
    if not (flag or shared.get("stop_when_decided")):
        return None
    return StopRule(
        margin=DEFAULT_MARGIN if chosen_margin is None else float(chosen_margin),
        batch=DEFAULT_BATCH if chosen_batch is None else int(chosen_batch),
    )


@dataclass(frozen=True)
class PairDecision:
    """A pair of variants after a round: ``a`` has the higher accuracy on the
    ``decision.examples`` paired examples, ``decision`` the interval of
    accuracy(a) − accuracy(b) and its verdict; ``decided_at``: the examples
    at the round that first decided it (``None``: not decided)."""

    a: str
    b: str
    decision: Decision
    decided_at: int | None

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        return {"a": self.a, "b": self.b, "verdict": d.verdict, "low": d.low, "high": d.high} | {
            "examples": d.examples,
            "decided_at": self.decided_at,
        }


def _example_scores(run: Run, example_ids: Sequence[int]) -> dict[int, float]:
    """Each completed example's score of ``run`` among ``example_ids``: the
    mean of ``correct`` over its completed epochs (0..1)."""
    totals: dict[int, list[int]] = {}
    rows = Prediction.objects.filter(run=run, example_id__in=example_ids, completed_at__isnull=False)
    for example_id, correct in rows.values_list("example_id", "correct"):
        totals.setdefault(example_id, []).append(1 if correct else 0)
    return {k: sum(v) / len(v) for k, v in totals.items()}


def pair_decisions(
    runs: dict[str, Run],
    example_ids: Sequence[int],
    *,
    alpha: float,
    margin: float,
    earlier: dict[tuple[str, str], int] | None = None,
) -> list[PairDecision]:
    """Every pair of the named ``runs`` decided on the paired examples
    among ``example_ids`` (in that order), each at ``alpha`` divided by the
    number of pairs; ``earlier``: the examples at which a pair (by its two
    names, sorted) was first decided in an earlier round."""
    from evaluation.experiments.sequential import decide  # numpy: not at every command's start

    scores = {name: _example_scores(run, example_ids) for name, run in runs.items()}
    names = sorted(runs)
    pairs = len(names) * (len(names) - 1) // 2
    found = []
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            both = [e for e in example_ids if e in scores[first] and e in scores[second]]
            diffs = [scores[first][e] - scores[second][e] for e in both]
            a, b = (first, second) if sum(diffs) >= 0 else (second, first)
            signed = diffs if a == first else [-d for d in diffs]
            decision = decide(signed, alpha=alpha / max(pairs, 1), margin=margin)
            at = (earlier or {}).get(_key(first, second))
            if at is None and decision.decided:
                at = decision.examples
            found.append(PairDecision(a=a, b=b, decision=decision, decided_at=at))
    return found


def _key(a: str, b: str) -> tuple[str, str]:
    """A pair's key whatever its order: its two names sorted."""
    return (a, b) if a <= b else (b, a)


def leader(runs: dict[str, Run], example_ids: Sequence[int]) -> str:
    """The variant with the highest accuracy on ``example_ids`` so far (ties: by name)."""
    means = {}
    for name, run in runs.items():
        scores = _example_scores(run, example_ids)
        means[name] = sum(scores.values()) / len(scores) if scores else 0.0
    return min(means, key=lambda name: (-means[name], name))


def top_decided(decisions: Sequence[PairDecision], best: str) -> bool:
    """Whether every pair of ``best`` is decided (its top group is then known)."""
    return all(p.decision.decided for p in decisions if best in (p.a, p.b))


DriveOnce = Callable[[ExperimentSpec], list[Any]]


def drive_in_rounds(
    spec: ExperimentSpec,
    experiment: Experiment,
    rule: StopRule,
    *,
    drive_once: DriveOnce,
    note: Callable[[str], None],
) -> list[Any]:
    """Drive ``spec`` in rounds (see the module docstring) and return the
    last round's outcomes. ``drive_once(spec_at_limit)``: one round — check,
    open, drive and finish every variant at the spec's ``limit``
    (``runner``'s own drive; a variant already at that limit is skipped)."""
    ids = list(examples_at(experiment.dataset_id, experiment.dataset_version).values_list("pk", flat=True))
    limit = spec.shared.get("limit")
    total = min(len(ids), int(limit)) if limit else len(ids)
    reached, outcomes = _done_before(experiment, spec, ids[:total], rule.batch), []
    earlier: dict[tuple[str, str], int] = {}
    decisions: list[PairDecision] = []
    while reached < total:
        reached = min(reached + rule.batch, total)
        at_limit = dataclasses.replace(spec, shared={**spec.shared, "limit": reached})
        outcomes = drive_once(at_limit)
        runs = {o.variant.name: o.run for o in outcomes if o.run is not None}
        decisions = pair_decisions(
            runs, ids[:reached], alpha=experiment.alpha, margin=rule.margin, earlier=earlier
        )
        earlier = {_key(p.a, p.b): p.decided_at for p in decisions if p.decided_at is not None}
        best = leader(runs, ids[:reached]) if runs else ""
        note(_round_line(reached, total, decisions))
        if len(runs) > 1 and top_decided(decisions, best):
            break
    stopped = reached < total
    _record(
        experiment, outcomes, rule, decisions, reached=reached, total=total, stopped=stopped, spec_limit=limit
    )
    if stopped:
        note(
            f"experiment {experiment.name!r}: stopped early at {reached} of {total} examples; "
            f"the other {total - reached} are not run (run the file again without --stop-when-decided "
            "to run them)"
        )
    return outcomes


def _done_before(experiment: Experiment, spec: ExperimentSpec, ids: Sequence[int], batch: int) -> int:
    """Where the rounds start: the examples every variant of ``spec`` has
    already completed from the first on (a resumed experiment; 0 with a new
    variant), less one batch when that is all of them (the last round then
    drives nothing and decides). The sequence being valid at every time,
    going on from there keeps it valid."""
    done = len(ids)
    for variant in spec.variants:
        run = Run.objects.filter(experiment=experiment, run_id=spec.run_id(variant)).first()
        if run is None:
            return 0
        rows = Prediction.objects.filter(run=run, completed_at__isnull=False)
        completed = set(rows.values_list("example_id", flat=True))
        done = min(done, next((i for i, e in enumerate(ids) if e not in completed), len(ids)))
    return done if done < len(ids) else max(len(ids) - batch, 0)


def _round_line(reached: int, total: int, decisions: Sequence[PairDecision]) -> str:
    words = "; ".join(
        f"{p.a} vs {p.b} {p.decision.verdict} [{p.decision.low:+.3f}, {p.decision.high:+.3f}]"
        for p in decisions
    )
    return f"after {reached} of {total} examples: {words or 'one variant, nothing to compare'}"


def _record(
    experiment: Experiment,
    outcomes: Sequence[Any],
    rule: StopRule,
    decisions: Sequence[PairDecision],
    *,
    reached: int,
    total: int,
    stopped: bool,
    spec_limit: int | None,
) -> None:
    """Store the sequential record on the experiment (``spec["stopped_early"]``;
    the file's next run replaces it) and each run's ``config["limit"]``: the
    examples reached when it stopped early, else the file's ``limit``."""
    record = {
        "stopped_early": stopped,
        "examples": reached,
        "of": total,
        "margin": rule.margin,
        "batch_size": rule.batch,
        "alpha": experiment.alpha,
        "construction": "Waudby-Smith & Ramdas (2023) predictable plug-in empirical Bernstein",
        "pairs": [p.to_dict() for p in decisions],
    }
    experiment.spec = {**(experiment.spec or {}), "stopped_early": record}
    experiment.save(update_fields=["spec"])
    # the run's limit is the examples it reached: a later run of the file
    # without the flag sees it unfinished and drives the rest
    limit = reached if stopped else spec_limit
    for outcome in outcomes:
        run = outcome.run
        if run is not None:
            run.config = {**(run.config or {}), "limit": limit}
            run.save(update_fields=["config"])


def decided_early_at(record: dict[str, Any] | None, a: str, b: str) -> int | None:
    """The examples at which the stopping rule's ``record`` decided the pair
    ``a``/``b`` (either order) before the data ran out, or ``None``."""
    for pair in (record or {}).get("pairs", []):
        at = pair.get("decided_at")
        if {pair["a"], pair["b"]} == {a, b} and at is not None and at < record["of"]:  # type: ignore[index]
            return int(at)
    return None
