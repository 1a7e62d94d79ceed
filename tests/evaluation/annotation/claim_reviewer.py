"""One reviewer's loop, in its own process, for the claim tests (issue 47):
``python -m tests.evaluation.annotation.claim_reviewer QUEUE USERNAME START`` waits
until the Unix time ``START`` (so that every reviewer starts at once), then
claims the next item of ``QUEUE``, labels it ``correct``, and so on until none
is left; prints the positions it was given, one a line. The database is
``DATABASE_URL``'s."""

from __future__ import annotations

import os
import sys
import time


def main(queue_name: str, username: str, start: float) -> None:
    """Loop "next item → label" as ``username`` over ``queue_name``; print each position."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from evaluation.annotation.labelling import give_label, next_item
    from evaluation.models import AnnotationQueue

    queue = AnnotationQueue.objects.get(name=queue_name)
    user = get_user_model().objects.get(username=username)
    time.sleep(max(0.0, start - time.time()))
    while (item := next_item(queue, user)) is not None:
        give_label(item, user, "correct")
        print(item.position, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
