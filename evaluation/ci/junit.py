"""A run's predictions as JUnit XML, the test report every CI system reads
(Jenkins, GitLab, GitHub's test reporters, Buildkite).

Pure: plain values in, an ``xml.etree.ElementTree`` element out; no Django
(CONTRIBUTING.md#pure-scoring-and-metrics). ``evaluation.ci.selectors`` builds
the suites from the stored rows.

The shape is the JUnit report as Jenkins' JUnit plugin and GitLab's parser
read it (the tests validate it against AgentLab's own schema of that format,
``tests/junit/agentlab-junit.xsd``): a ``<testsuites>`` root, one
``<testsuite>`` per task type (per variant for an experiment) with
``<properties>``, one ``<testcase>`` per example — ``name`` its
``question_id``, ``classname`` ``DATASET.TASK_TYPE``, ``time`` its latency in
seconds — and in it at most one of:

- ``<failure>``: a wrong prediction; ``message`` the score explanation, the
  text the question, the gold answer and the answer;
- ``<error>``: a turn that ended in an error; ``message`` its stop reason,
  ``type`` the stop reason, the text its cause;
- ``<skipped>``: a prediction that could not be scored.

A right prediction is a bare ``<testcase>`` (passed). The counts on each
suite (``tests``, ``failures``, ``errors``, ``skipped``) are those of its
cases, and the root's their sums (docs/evaluating.md#ci-reports).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["CaseVerdict", "JunitCase", "JunitSuite", "junit_bytes", "junit_element"]

#: Characters XML 1.0 cannot hold (a model may write any of them): replaced by
#: U+FFFD, so a stray control character never makes the report unreadable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


class CaseVerdict(StrEnum):
    """What one example's prediction was, in JUnit's terms."""

    PASSED = "passed"
    FAILURE = "failure"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class JunitCase:
    """One example of one run (one epoch of it): ``name`` (its question id),
    ``classname`` (``DATASET.TASK_TYPE``), ``time_s`` (latency in seconds,
    ``None`` when unknown), the ``verdict``, the element's ``kind``
    (``type`` attribute), ``message`` and ``text`` (unused when passed)."""

    name: str
    classname: str
    time_s: float | None
    verdict: CaseVerdict
    message: str = ""
    kind: str = ""
    text: str = ""


@dataclass(frozen=True)
class JunitSuite:
    """One ``<testsuite>``: its ``name``, ``properties`` (name, value pairs, in
    order), ``timestamp`` (ISO 8601, the run's start) and ``cases``."""

    name: str
    cases: Sequence[JunitCase]
    properties: Sequence[tuple[str, str]] = field(default_factory=tuple)
    timestamp: str = ""

    def count(self, verdict: CaseVerdict) -> int:
        """How many of the cases have ``verdict``."""
        return sum(1 for case in self.cases if case.verdict == verdict)

    @property
    def time_s(self) -> float:
        """The sum of the cases' known latencies, in seconds."""
        return sum(case.time_s for case in self.cases if case.time_s is not None)


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _seconds(value: float) -> str:
    # a plain decimal (digits and a decimal point, no exponent), as CI servers parse it
    return f"{value:.3f}"


def _case_element(case: JunitCase) -> ET.Element:
    element = ET.Element("testcase", {"name": _clean(case.name), "classname": _clean(case.classname)})
    if case.time_s is not None:
        element.set("time", _seconds(case.time_s))
    if case.verdict != CaseVerdict.PASSED:
        child = ET.SubElement(element, case.verdict.value, {"message": _clean(case.message)})
        if case.kind:
            child.set("type", _clean(case.kind))
        child.text = _clean(case.text)
    return element


def _suite_element(suite: JunitSuite) -> ET.Element:
    element = ET.Element(
        "testsuite",
        {
            "name": _clean(suite.name),
            "tests": str(len(suite.cases)),
            "failures": str(suite.count(CaseVerdict.FAILURE)),
            "errors": str(suite.count(CaseVerdict.ERROR)),
            "skipped": str(suite.count(CaseVerdict.SKIPPED)),
            "time": _seconds(suite.time_s),
        },
    )
    if suite.timestamp:
        element.set("timestamp", suite.timestamp)
    if suite.properties:
        properties = ET.SubElement(element, "properties")
        for name, value in suite.properties:
            ET.SubElement(properties, "property", {"name": _clean(name), "value": _clean(value)})
    element.extend(_case_element(case) for case in suite.cases)
    return element


def junit_element(suites: Iterable[JunitSuite], *, name: str) -> ET.Element:
    """The ``<testsuites>`` element named ``name`` holding ``suites``, with
    the summed ``tests``, ``failures``, ``errors`` and ``time`` (seconds)."""
    suites = list(suites)
    root = ET.Element(
        "testsuites",
        {
            "name": _clean(name),
            "tests": str(sum(len(s.cases) for s in suites)),
            "failures": str(sum(s.count(CaseVerdict.FAILURE) for s in suites)),
            "errors": str(sum(s.count(CaseVerdict.ERROR) for s in suites)),
            "time": _seconds(sum(s.time_s for s in suites)),
        },
    )
    root.extend(_suite_element(suite) for suite in suites)
    return root


def junit_bytes(suites: Iterable[JunitSuite], *, name: str) -> bytes:
    """The JUnit XML document (UTF-8, with its XML declaration, indented)."""
    root = junit_element(suites, name=name)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
