"""Where the CI reports go: ``--junit-xml FILE`` and ``--summary-md FILE`` of
``run_eval``, ``run_experiment`` and ``compare_runs``, checked before the
work and written after it, and the summary appended to
``$GITHUB_STEP_SUMMARY`` when GitHub Actions sets it
(docs/evaluating.md#ci-reports).

Links point at the admin's pages under ``AGENTLAB_BASE_URL`` (the address
people open AgentLab at); without it the summary has no links.
"""

from __future__ import annotations

import os
from argparse import ArgumentParser
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.urls import reverse

from common.commands import json_target_check

__all__ = ["ReportTargets", "add_report_arguments", "comparison_links", "report_targets", "run_links"]

#: The file GitHub Actions renders as a step's summary (one per step, appended to).
GITHUB_STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


@dataclass(frozen=True)
class ReportTargets:
    """The report files a command was asked for (``None``: not asked)."""

    junit_xml: str | None = None
    summary_md: str | None = None

    def write(self, *, junit: bytes | None, summary: str | None) -> list[str]:
        """Write the JUnit XML and the Markdown summary to the files asked for,
        and append the summary to ``$GITHUB_STEP_SUMMARY`` when set; returns
        the paths written. Raises ``ValueError`` (naming the option and the
        path) when a file cannot be written."""
        written = []
        if self.junit_xml and junit is not None:
            _write(self.junit_xml, junit, option="--junit-xml")
            written.append(self.junit_xml)
        if self.summary_md and summary is not None:
            _write(self.summary_md, summary.encode("utf-8"), option="--summary-md")
            written.append(self.summary_md)
            step_summary = os.environ.get(GITHUB_STEP_SUMMARY, "").strip()
            if step_summary:
                _write(
                    step_summary,
                    summary.encode("utf-8") + b"\n",
                    option=f"${GITHUB_STEP_SUMMARY}",
                    append=True,
                )
                written.append(step_summary)
        return written


def _write(path: str, data: bytes, *, option: str, append: bool = False) -> None:
    try:
        with Path(path).open("ab" if append else "wb") as f:
            f.write(data)
    except OSError as exc:
        raise ValueError(f"could not write {option} {path}: {exc}") from exc


def report_targets(*, junit_xml: str | None, summary_md: str | None) -> ReportTargets:
    """The report options checked before any work: each must be a file that
    can be written (``json_target_check``: not a folder, in a folder that
    exists, writable), and the two must differ; ``ValueError`` otherwise."""
    if junit_xml:
        json_target_check(junit_xml, option="--junit-xml")
    if summary_md:
        json_target_check(summary_md, option="--summary-md")
    if junit_xml and summary_md and Path(junit_xml).resolve() == Path(summary_md).resolve():
        raise ValueError(f"--junit-xml and --summary-md are both {junit_xml}: give two files")
    return ReportTargets(junit_xml=junit_xml or None, summary_md=summary_md or None)


def _absolute(path: str) -> str | None:
    base = (getattr(settings, "AGENTLAB_BASE_URL", "") or "").rstrip("/")
    return f"{base}{path}" if base else None


def run_links(run_pk: int) -> list[tuple[str, str]]:
    """The run report's link (``[]`` without ``AGENTLAB_BASE_URL``)."""
    url = _absolute(reverse("admin:evaluation_run_report", args=[run_pk]))
    return [("Run report", url)] if url else []


def comparison_links(base_pk: int, candidate_pk: int) -> list[tuple[str, str]]:
    """The candidate's report and the comparison page's links (``[]``
    without ``AGENTLAB_BASE_URL``)."""
    url = _absolute(reverse("admin:evaluation_run_compare", args=[base_pk, candidate_pk]))
    return [*run_links(candidate_pk), ("Comparison", url)] if url else []


def add_report_arguments(parser: ArgumentParser) -> None:
    """``--junit-xml FILE`` and ``--summary-md FILE`` on a command."""
    parser.add_argument(
        "--junit-xml",
        dest="junit_xml",
        default=None,
        metavar="FILE",
        help="also write the predictions as JUnit XML to FILE (one test case per example; a wrong "
        "answer a failure, an errored turn an error, an unscored one skipped) for a CI's test report",
    )
    parser.add_argument(
        "--summary-md",
        dest="summary_md",
        default=None,
        metavar="FILE",
        help="also write a Markdown summary (metrics, the gate's verdict, fixed and broken examples) to "
        "FILE, and append it to $GITHUB_STEP_SUMMARY when that is set",
    )
