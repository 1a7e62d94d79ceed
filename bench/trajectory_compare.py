"""Two agent variants compared on answers and on paths (issue 48's closing note).

Writes the shared HotpotQA and Spider subsets again with expected
trajectories taken from the gold — HotpotQA: one ``search_documents`` then
the answer (``strict``, arguments ``ignore``: the query's words are the
agent's); Spider: one ``sql_query`` then the answer (``strict``, the query
compared by the ``text`` rule against the gold SQL) — imports them, runs two
variants of the agent on each with ``run_eval`` and prints each run's
metrics and ``compare_runs`` between them.

    python bench/trajectory_compare.py [--out DIR] [--limit N] [--model local]

Variants: with ``--model stub`` (the default) two scripted agents on the
stub OpenAI-compatible server — ``direct`` (the gold path: one search or the
gold SQL, then the gold answer) and ``exploring`` (an extra call first: a
second search for the first supporting title, or a look at the schema, then
the same answer) — so the answers tie and the paths differ by design; with
``--model local`` the embedded model, once with review and once without
(slow on two shared cores). Runs with the settings of the environment, like
``manage.py``; the run ids are ``paths-<dataset>-<variant>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"


def with_trajectories(out: Path, limit: int | None) -> dict[str, Path]:
    """The two subsets with expected trajectories from the gold, under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(DATASETS / "spider-databases", out / "spider-databases", dirs_exist_ok=True)
    files = {}
    for name, source in (
        ("hotpotqa", "hotpotqa-dev-distractor-52.jsonl"),
        ("spider", "spider-dev-sql-61.jsonl"),
    ):
        rows = [
            json.loads(line) for line in (DATASETS / source).read_text(encoding="utf-8").splitlines() if line
        ]
        for row in rows[:limit]:
            if name == "hotpotqa":
                row["trajectory"] = [{"tool": "search_documents", "args": {}}]
                row["args_match"] = "ignore"
            else:
                row["trajectory"] = [{"tool": "sql_query", "args": {"query": row["gold_sql"]}}]
                row["arg_rules"] = {"query": "text"}
            row["trajectory_match"] = "strict"
        path = out / f"{name}-paths.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[:limit]), encoding="utf-8")
        files[name] = path
    return files


def stub_agent(rows: dict[str, dict[str, Any]], variant: str):
    """A scripted agent: the gold path (``direct``) or one extra call first (``exploring``)."""
    from agentlab.testing.stub_llm import final_answer_reply, tool_call_reply

    def handler(body: dict[str, Any]):
        question = next(m["content"] for m in body["messages"] if m["role"] == "user")
        row = rows[question]
        if "gold_sql" in row:
            calls = [("sql_query", {"query": row["gold_sql"]})]
            extra = ("sql_query", {"query": "SELECT name FROM sqlite_master WHERE type = 'table'"})
        else:
            calls = [("search_documents", {"query": question})]
            facts = row.get("supporting_facts") or [{"title": question}]
            extra = ("search_documents", {"query": str(facts[0]["title"])})
        if variant == "exploring":
            calls = [extra, *calls]
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done < len(calls):
            return tool_call_reply(*calls[done])
        answer = row["answer"]
        return final_answer_reply(answer if isinstance(answer, str) else answer[0], "gold", "scripted")

    return handler


def run_stub(path: Path, run_id: str, variant: str) -> None:
    from django.conf import settings
    from django.core.management import call_command

    from agentlab.testing.stub_llm import StubLLMServer

    rows = {r["question"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    with StubLLMServer(stub_agent(rows, variant)) as server:
        settings.AGENTLAB_LLM_BASE_URL = server.base_url
        settings.AGENTLAB_LLM_API_KEY = "stub"
        settings.AGENTLAB_MODEL = "stub-model"
        call_command("run_eval", str(path), "--run-id", run_id, "--no-review", "--concurrency", "4")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="var/trajectory-compare", help="where the datasets are written")
    parser.add_argument("--limit", type=int, default=None, help="examples per dataset (default all)")
    parser.add_argument("--model", choices=("stub", "local"), default="stub")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    variants = ("direct", "exploring") if args.model == "stub" else ("review", "no-review")
    for name, path in with_trajectories(Path(args.out), args.limit).items():
        ids = [f"paths-{name}-{variant}" for variant in variants]
        for run_id, variant in zip(ids, variants, strict=True):
            print(f"\n## {run_id}\n", flush=True)
            if args.model == "stub":
                run_stub(path, run_id, variant)
            else:
                review = ["--no-review"] if variant == "no-review" else []
                call_command("run_eval", str(path), "--run-id", run_id, *review, "--concurrency", "1")
        print(f"\n## compare_runs {ids[0]} {ids[1]}\n", flush=True)
        call_command("compare_runs", *ids)


if __name__ == "__main__":
    main()
