"""Drive one chat turn with the configured LLM and print its event log.

    python bench/chat_turn_events.py ["What is 17 * 23? Use the calculator."] [--user NAME]

Runs with the settings of the environment (nothing set: SQLite under
``var/`` and the embedded local model), through the same services and driver
as the chat page: a conversation of user NAME (created if missing, default
``events-demo``), a turn started on it, driven under the chat policy (its
review included), then every event printed as one JSON line
(``{"seq", "type", "data", "at"}``), and the turn's final fields.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("question", nargs="?", default="What is 17 * 23? Use the calculator.")
    parser.add_argument("--user", default="events-demo")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from common.db import DatabaseThreads
    from turns.driver import CHAT, drive_turn
    from turns.llm import get_provider
    from turns.models import Turn
    from turns.selectors import events_after
    from turns.services import conversation_create, turn_create

    user, _ = get_user_model().objects.get_or_create(username=args.user)
    conversation = conversation_create(owner=user, title=args.question[:60])
    # turn_create, not turn_start: the turn is driven here, not handed to a job
    turn = turn_create(owner=user, question=args.question, conversation=conversation)

    async def drive() -> None:
        provider = get_provider()
        with DatabaseThreads(max_workers=2) as db:
            try:
                await drive_turn(turn.pk, policy=CHAT, provider=provider, db=db)
            finally:
                await provider.aclose()

    asyncio.run(drive())
    for event in events_after(turn_id=turn.pk):
        line = {"seq": event.seq, "type": event.type, "data": event.data, "at": event.created_at.isoformat()}
        print(json.dumps(line, ensure_ascii=False))
    done = Turn.objects.get(pk=turn.pk)
    summary = {
        "turn": done.pk,
        "status": done.status,
        "stop_reason": done.stop_reason,
        "answer": done.answer,
        "usage": done.usage,
    }
    print(json.dumps(summary, ensure_ascii=False))


if __name__ == "__main__":
    main()
