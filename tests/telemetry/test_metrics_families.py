"""``/metrics`` in multiprocess mode lists every family on its first scrape
(issue 47, item 6), as it does without the shared directory — a dashboard or
alert rule that names a family before its first sample finds it. Each scrape
runs in a fresh process, as a server's first one does (``prometheus_client``
picks its multiprocess value class when it is first imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

#: A fresh process's first scrape: the families' (name, type), as JSON.
SCRAPE = """
import json, os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from prometheus_client.parser import text_string_to_metric_families
from agentlab.telemetry.metrics import exposition
text = exposition(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None)[0].decode()
print(json.dumps(sorted((f.name, f.type) for f in text_string_to_metric_families(text))))
"""

#: Every family of ``agentlab.telemetry.metrics.Metrics``.
FAMILIES = [
    ("agentlab_eval_examples_driven", "counter"),
    ("agentlab_events_appended", "counter"),
    ("agentlab_llm_call_duration_seconds", "histogram"),
    ("agentlab_llm_call_errors", "counter"),
    ("agentlab_llm_tokens", "counter"),
    ("agentlab_stream_subscribers", "gauge"),
    ("agentlab_tool_calls", "counter"),
    ("agentlab_tool_errors", "counter"),
    ("agentlab_turn_duration_seconds", "histogram"),
    ("agentlab_turn_queue_wait_seconds", "histogram"),
    ("agentlab_turns_finished", "counter"),
    ("agentlab_turns_started", "counter"),
]


def first_scrape(multiproc_dir: Path | None) -> list[tuple[str, str]]:
    """The agentlab families of a fresh process's first scrape."""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    if multiproc_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc_dir)
    out = subprocess.run(
        [sys.executable, "-c", SCRAPE],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    return [(name, kind) for name, kind in json.loads(out) if name.startswith("agentlab_")]


def test_the_first_scrape_lists_every_family_with_and_without_the_shared_directory(tmp_path):
    assert first_scrape(tmp_path) == FAMILIES
    without = first_scrape(None)
    # without the directory the library adds a *_created gauge beside an unlabelled counter
    assert [f for f in without if not f[0].endswith("_created")] == FAMILIES


def test_a_family_counted_in_another_process_keeps_its_summed_samples(tmp_path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    count = (
        "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); "
        "django.setup(); from agentlab.telemetry.metrics import metrics, child; "
        "child(metrics().turns_started, 'chat').inc(3)"
    )
    subprocess.run([sys.executable, "-c", count], cwd=ROOT, env=env, check=True, timeout=60)
    scrape = SCRAPE.replace(
        "print(json.dumps(sorted((f.name, f.type) for f in text_string_to_metric_families(text))))",
        "print(json.dumps([[s.name, s.labels, s.value] for f in text_string_to_metric_families(text) "
        "for s in f.samples if f.name == 'agentlab_turns_started']))",
    )
    out = subprocess.run(
        [sys.executable, "-c", scrape],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(out) == [["agentlab_turns_started_total", {"kind": "chat"}, 3.0]]
