"""``manage.py run_eval DATASET`` — evaluate the agent over a dataset (DESIGN.md §10).

Exit codes: 0 done, 1 accuracy below ``--fail-under`` (or nothing could be
scored), 2 bad input (options, dataset, model file, database), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from tqdm import tqdm

from agentlab.agent.providers.local import LocalGGUFProvider, LocalModelUnavailable
from common.commands import database_check, database_errors
from common.db import DatabaseThreads
from common.errors import AgentLabError
from common.version import code_version
from evaluation.datasets import DatasetFormatError
from evaluation.metrics import format_table
from evaluation.models import RunStatus
from evaluation.parallel import drive_in_processes
from evaluation.runner import RunLease, drive_examples
from evaluation.selectors import dataset_fallback_task_types, fallback_note
from evaluation.services import dataset_resolve, run_finish, run_id_check, run_lease_tag, run_plan, run_start
from turns.llm import get_provider


class Command(BaseCommand):
    help = "Run the agent over a dataset (registered name, 'demo', or a .jsonl file) and record predictions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dataset", help="registered dataset name, 'demo', or a path to a .jsonl file")
        parser.add_argument("--run-id", default=None, help="run id; the same id again resumes the run")
        parser.add_argument("--limit", type=int, default=None, help="only the first N examples")
        parser.add_argument("--concurrency", type=int, default=4, help="examples driven at once (default 4)")
        parser.add_argument("--max-steps", type=int, default=None, help="agent steps per example")
        parser.add_argument("--model", default=None, help="model name (endpoint) or GGUF path (local model)")
        parser.add_argument(
            "--fail-under", type=float, default=None, help="exit 1 if accuracy is below this (0..1)"
        )
        parser.add_argument(
            "--review",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="review each answer with a second LLM call, retrying once on its "
            "instruction (default on; --no-review halves the LLM calls)",
        )
        parser.add_argument(
            "--retry-errors",
            action="store_true",
            help="when resuming, run again the examples whose turn ended in an error "
            "(a provider outage, say) as a new attempt",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="worker processes sharing --concurrency (default 1); more than one uses "
            "more cores against an OpenAI-compatible endpoint",
        )
        parser.add_argument(
            "--json", dest="json_path", default=None, help="also write run and metrics to FILE"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        self._lease: RunLease | None = None
        try:
            with database_errors():
                self._run(**opts)
        except (DatasetFormatError, AgentLabError, ValueError, LocalModelUnavailable) as exc:
            raise CommandError(str(exc), returncode=2) from exc
        finally:
            if self._lease is not None:
                self._lease.stop()

    def _run(
        self,
        *,
        dataset: str,
        run_id: str | None,
        limit: int | None,
        concurrency: int,
        max_steps: int | None,
        model: str | None,
        fail_under: float | None,
        json_path: str | None,
        review: bool = True,
        retry_errors: bool = False,
        workers: int = 1,
        **_: Any,
    ) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"--limit must be at least 1, got {limit}")
        if not 1 <= concurrency <= 256:
            raise ValueError(f"--concurrency must be between 1 and 256, got {concurrency}")
        # name where the value came from: the user may never have passed the flag
        max_steps_from = "--max-steps" if max_steps is not None else "AGENTLAB_MAX_STEPS"
        max_steps = max_steps if max_steps is not None else settings.AGENTLAB_MAX_STEPS
        if max_steps < 1:
            raise ValueError(f"{max_steps_from} must be at least 1, got {max_steps}")
        if not 1 <= workers <= min(concurrency, 16):
            raise ValueError(
                f"--workers must be between 1 and {min(concurrency, 16)} (no more than --concurrency, "
                f"{concurrency}, and at most 16), got {workers}"
            )
        if fail_under is not None and not 0 <= fail_under <= 1:
            raise ValueError(f"--fail-under must be between 0 and 1, got {fail_under}")
        if run_id is not None:
            run_id = run_id_check(run_id)
        if json_path:
            # checked before the run: the file is written only after it
            if Path(json_path).is_dir():
                raise ValueError(f"--json {json_path} is a folder; give the path of a file to write")
            parent = Path(json_path).resolve().parent
            if not parent.is_dir():
                raise ValueError(f"--json {json_path}: folder {parent} does not exist")
            target = Path(json_path)
            if not os.access(target if target.exists() else parent, os.W_OK):
                raise ValueError(f"--json {json_path}: not writable")
        database_check()

        provider = get_provider(model=model)
        if workers > 1 and provider.name == "local":
            raise ValueError(
                "--workers above 1 needs an OpenAI-compatible endpoint (AGENTLAB_LLM_BASE_URL): "
                "each worker would load its own copy of the local model"
            )
        if isinstance(provider, LocalGGUFProvider):
            # Loaded here, before anything is written: a file that is not a
            # GGUF would otherwise fail every example as a provider error.
            provider.load()
        ds = dataset_resolve(name_or_path=dataset)
        # the random part keeps two runs started in the same second apart
        run_id = run_id or f"{ds.name}-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        config = {
            "provider": provider.name,
            "model": provider.model,
            "max_steps": max_steps,
            "concurrency": concurrency,
            "limit": limit,
            "scorer": "per example, else per task type",
            "dataset": ds.name,
            "code_version": code_version(),
            "review": review,
            "workers": workers,
        }
        # the run's lease: another run_eval on this run id is refused while we drive it
        driver = run_lease_tag()
        run, resumed = run_start(run_id=run_id, dataset=ds, config=config, driver=driver)
        self._lease = RunLease(run_pk=run.pk, driver=driver).start()
        planned, skipped = run_plan(
            run=run, limit=limit, max_steps=max_steps, model=provider.model, retry_errors=retry_errors
        )
        in_run = run.predictions.count()
        self.stderr.write(
            f"run {run.run_id} on {ds.name}: {len(planned)} to do, {skipped} already done"
            + (" (resumed)" if resumed else "")
            + f"; {provider.name} model {provider.model}"
            # a smaller --limit on a resume plans fewer examples than the run
            # holds, but the metrics are over all of its rows
            + (
                f"; the metrics cover all {in_run} predictions of the run, "
                f"not only these {len(planned) + skipped}"
                if in_run > len(planned) + skipped
                else ""
            )
        )
        note = fallback_note(dataset_fallback_task_types(dataset=ds))
        if note:
            self.stderr.write(note)

        bar = tqdm(total=len(planned), disable=None, desc=run.run_id, unit="ex", file=sys.stderr)
        status = RunStatus.SUCCESS
        self._driven = 0
        started = time.monotonic()
        wall_s: float | None = None
        try:
            if workers > 1 and len(planned) > 1:
                wall_s = self._drive_in_processes(
                    planned,
                    provider=provider,
                    workers=workers,
                    concurrency=concurrency,
                    model=model,
                    bar=bar,
                    review=review,
                )
            else:
                asyncio.run(
                    self._drive(planned, provider=provider, concurrency=concurrency, bar=bar, review=review)
                )
        except KeyboardInterrupt:
            status = RunStatus.CANCELLED
            bar.close()
            self.stderr.write(f"\ninterrupted; run again with --run-id {run.run_id} to resume")
            raise SystemExit(130) from None
        except BaseException:
            status = RunStatus.ERROR
            raise
        finally:
            bar.close()
            run = run_finish(
                run=run,
                status=status,
                driven=self._driven,
                wall_s=wall_s if wall_s is not None else time.monotonic() - started,
            )

        self.stdout.write(format_table(run.metrics))
        self.stdout.write(f"run id: {run.run_id}")
        if json_path:
            try:
                Path(json_path).write_text(
                    json.dumps(
                        {
                            "run_id": run.run_id,
                            "dataset": ds.name,
                            "status": run.status,
                            "config": run.config,
                            "metrics": run.metrics,
                        },
                        indent=2,
                        ensure_ascii=False,
                    ),
                    encoding="utf-8",
                )
            except OSError as exc:
                raise CommandError(
                    f"could not write --json {json_path}: {exc}; the run and its metrics are "
                    f"stored (run id {run.run_id})",
                    returncode=2,
                ) from exc
        accuracy = run.metrics.get("accuracy")
        if fail_under is not None and accuracy is None:
            # nothing scored cannot pass a bar, not even 0
            raise CommandError(
                f"no example could be scored ({run.metrics.get('unscored', 0)} unscored of "
                f"{run.metrics.get('total', 0)}), so accuracy cannot meet --fail-under {fail_under}",
                returncode=1,
            )
        if fail_under is not None and accuracy < fail_under:
            raise CommandError(f"accuracy {accuracy:.3f} is below --fail-under {fail_under}", returncode=1)

    def _drive_in_processes(
        self,
        planned: list[Any],
        *,
        provider: Any,
        workers: int,
        concurrency: int,
        model: str | None,
        bar: tqdm,
        review: bool,
    ) -> float:
        def done() -> None:
            self._driven += 1
            bar.update(1)

        close = getattr(provider, "aclose", None)
        if close is not None:  # the workers build their own
            asyncio.run(close())
        return drive_in_processes(
            planned, workers=workers, concurrency=concurrency, model=model, review=review, on_done=done
        )

    async def _drive(
        self, planned: list[Any], *, provider: Any, concurrency: int, bar: tqdm, review: bool = True
    ) -> None:
        def done(_item: Any) -> None:
            self._driven += 1
            bar.update(1)

        with DatabaseThreads(max_workers=min(concurrency, 8)) as db:
            try:
                await drive_examples(
                    planned, provider=provider, db=db, concurrency=concurrency, on_done=done, review=review
                )
            finally:
                close = getattr(provider, "aclose", None)
                if close is not None:
                    await close()
