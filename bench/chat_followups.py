"""Ten two-turn chats with the configured LLM: a question, then a follow-up that needs the first answer.

    python bench/chat_followups.py [--user NAME] [--limit N]

Runs with the settings of the environment (nothing set: SQLite under ``var/``
and the embedded local model), through the same services and driver as the
chat page: per chat one conversation, its first turn driven under the chat
policy, then its follow-up on the same conversation. Each answer is scored
with the ``numeric`` scorer against the pair's gold answers. Prints one JSON
line per chat and a summary line: turns answered correctly per position
(with the 95 % Wilson interval), seconds per chat, stop reasons
(docs/benchmarks.md#the-embedded-model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: (first question, its answer, the follow-up, its answer): the follow-up is
#: answerable only from the first turn.
CHATS: tuple[tuple[str, str, str, str], ...] = (
    ("What is 12 * 7? Use the calculator.", "84", "Now add 16 to that result.", "100"),
    ("What is 45 + 38?", "83", "Multiply that by 2.", "166"),
    (
        "A shop sells 9 boxes of 14 pens. How many pens is that?",
        "126",
        "If 26 of them are sold, how many are left?",
        "100",
    ),
    ("What is 250 / 5?", "50", "What is that number squared?", "2500"),
    ("How many minutes are in 3 hours?", "180", "And in twice as many hours?", "360"),
    ("What is 17 * 23?", "391", "Subtract 91 from the previous answer.", "300"),
    (
        "Tom has 35 apples and buys 15 more. How many does he have?",
        "50",
        "He gives half of them away. How many are left?",
        "25",
    ),
    ("What is 1000 - 456?", "544", "Divide that by 4.", "136"),
    ("What is 6 * 6 * 6?", "216", "Add 84 to it.", "300"),
    (
        "A week has 7 days. How many days are in 8 weeks?",
        "56",
        "How many days is that plus one more week?",
        "63",
    ),
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--user", default="followups-bench")
    parser.add_argument("--limit", type=int, default=len(CHATS))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from common.db import DatabaseThreads
    from evaluation.scoring.dispatch import score
    from turns.driver import CHAT, drive_turn
    from turns.llm import get_provider
    from turns.models import Turn
    from turns.services import conversation_create, turn_create

    user, _ = get_user_model().objects.get_or_create(username=args.user)

    async def drive(turn_id: int, provider: object, db: DatabaseThreads) -> Turn:
        await drive_turn(turn_id, policy=CHAT, provider=provider, db=db)  # type: ignore[arg-type]
        return await db.run(Turn.objects.get, pk=turn_id)

    async def chats() -> list[dict[str, object]]:
        provider = get_provider()
        rows = []
        with DatabaseThreads(max_workers=2) as db:
            try:
                for first, gold1, follow, gold2 in CHATS[: args.limit]:
                    started = time.monotonic()
                    conversation = await db.run(conversation_create, owner=user, title=first[:60])
                    row: dict[str, object] = {"question": first}
                    for position, (question, gold) in enumerate(((first, gold1), (follow, gold2)), 1):
                        turn = await db.run(
                            turn_create, owner=user, question=question, conversation=conversation
                        )
                        done = await drive(turn.pk, provider, db)
                        verdict = score(prediction=done.answer, gold=gold, scorer="numeric")
                        row[f"turn{position}"] = {
                            "answer": done.answer,
                            "gold": gold,
                            "correct": bool(verdict.correct),
                            "stop_reason": done.stop_reason,
                        }
                    row["seconds"] = round(time.monotonic() - started, 1)
                    print(json.dumps(row, ensure_ascii=False), flush=True)
                    rows.append(row)
            finally:
                await provider.aclose()
        return rows

    rows = asyncio.run(chats())
    print(json.dumps(summary(rows), ensure_ascii=False))


def summary(rows: list[dict[str, Any]]) -> dict[str, object]:
    """Turns correct per position (``accuracy_text``: with the 95 % Wilson
    interval), their stop reasons, and the mean seconds per chat."""
    from evaluation.metrics.intervals import accuracy_text

    out: dict[str, object] = {"chats": len(rows)}
    for position in (1, 2):
        turns = [r[f"turn{position}"] for r in rows]
        right = sum(1 for t in turns if t["correct"])
        out[f"turn{position}_correct"] = accuracy_text(right, len(rows))
        stops: dict[str, int] = {}
        for t in turns:
            reason = str(t["stop_reason"])
            stops[reason] = stops.get(reason, 0) + 1
        out[f"turn{position}_stop_reasons"] = stops
    seconds = [float(r["seconds"]) for r in rows]
    out["seconds_per_chat"] = round(sum(seconds) / max(1, len(rows)), 1)
    return out


if __name__ == "__main__":
    main()
