"""The CI reports of each command put together: what ``run_eval``,
``compare_runs`` and ``run_experiment`` write for ``--junit-xml`` and
``--summary-md`` (docs/evaluating.md#ci-reports)."""

from __future__ import annotations

from collections.abc import Sequence

from evaluation.ci.junit import junit_bytes
from evaluation.ci.outputs import ReportTargets, comparison_links, run_links
from evaluation.ci.selectors import run_suites, variant_suite
from evaluation.ci.summary_md import RunHeading, comparison_summary_md, experiment_summary_md, run_summary_md
from evaluation.compare.shapes import Comparison
from evaluation.datasets.subsets import subset_words
from evaluation.models import Run

__all__ = ["comparison_reports", "experiment_reports", "run_reports"]


def run_reports(
    targets: ReportTargets,
    *,
    run: Run,
    failures: Sequence[str],
    gated: bool,
    comparison: Comparison | None = None,
    alpha: float = 0.05,
    note: str = "",
) -> list[str]:
    """Write ``run_eval``'s reports: the run's predictions, one suite per task
    type, and its summary (``failures``: the failed gates' messages; with
    ``comparison`` the baseline's verdict and examples). Returns the paths
    written; ``ValueError`` when one cannot be."""
    junit = summary = None
    if targets.junit_xml:
        junit = junit_bytes(run_suites(run), name=f"agentlab {run.run_id}")
    if targets.summary_md:
        links = run_links(run.pk)
        if comparison is not None:
            base = (
                Run.objects.filter(run_id=comparison["base"]["run_id"]).values_list("pk", flat=True).first()
            )
            links = comparison_links(base, run.pk) if base is not None else links
        heading = RunHeading(
            run_id=run.run_id,
            dataset=run.dataset.name,
            dataset_version=run.dataset_version,
            model=str((run.config or {}).get("model") or ""),
            failures=list(failures),
            gated=gated,
            links=links,
            subset=subset_words(run.config.get("split"), run.config.get("tags") or ()),
        )
        summary = run_summary_md(heading, run.metrics, comparison=comparison, alpha=alpha, note=note)
    return targets.write(junit=junit, summary=summary)


def comparison_reports(
    targets: ReportTargets, *, base: Run, candidate: Run, comparison: Comparison, alpha: float
) -> list[str]:
    """Write ``compare_runs``' reports: the candidate's predictions (a broken
    example's failure says so), with the comparison's figures as properties,
    and the comparison's summary."""
    junit = summary = None
    if targets.junit_xml:
        overall = comparison["overall"]
        extra = [
            ("baseline", base.run_id),
            ("difference", "" if overall["difference"] is None else f"{overall['difference']:.6g}"),
            ("p_value", "" if overall["p_value"] is None else f"{overall['p_value']:.6g}"),
        ]
        notes = {pair["example_id"]: f"broken: right in {base.run_id}" for pair in comparison["broken"]}
        junit = junit_bytes(
            run_suites(candidate, extra=extra, notes=notes),
            name=f"agentlab {base.run_id} vs {candidate.run_id}",
        )
    if targets.summary_md:
        summary = comparison_summary_md(
            comparison, alpha=alpha, links=comparison_links(base.pk, candidate.pk)
        )
    return targets.write(junit=junit, summary=summary)


def experiment_reports(
    targets: ReportTargets,
    *,
    board: dict,
    runs: Sequence[Run],
    comparisons: Sequence[tuple[str, Comparison]],
    failures: Sequence[str],
) -> list[str]:
    """Write ``run_experiment``'s reports: one suite per variant, and the
    leaderboard with each variant compared with the baseline variant."""
    junit = summary = None
    if targets.junit_xml:
        junit = junit_bytes(
            [variant_suite(run) for run in runs], name=f"agentlab experiment {board['experiment']}"
        )
    if targets.summary_md:
        summary = experiment_summary_md(board, comparisons=comparisons, failures=failures)
    return targets.write(junit=junit, summary=summary)
