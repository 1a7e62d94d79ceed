# Issue 40: the archived attempts in Turn.meta["attempts"] become TurnAttempt rows, nothing lost;
# backwards, the rows become the meta's list again, key for key as the old archive wrote it.

from datetime import datetime

from django.db import migrations

#: The keys every archived dict had, and the ones its reason added (turns.meta.attempt_archive before issue 40).
_ALWAYS = ("status", "outcome", "stop_reason", "answer", "evidence", "reasoning", "steps", "usage")
_BY_REASON = {
    "review": ("question", "review", "trace"),
    "retry": ("clarifying_question", "timings", "failure_cause", "failure_error"),
    "continue": ("timings", "failure_cause", "failure_error"),
}
_TEXT = ("status", "outcome", "stop_reason", "answer", "evidence", "reasoning", "clarifying_question", "question")


def _ends(events):
    """attempt number -> the seq of the last event of that attempt: the event
    before the ``attempt.retry`` that started the next one."""
    return {
        int((data or {}).get("attempt") or 0) - 1: seq - 1
        for seq, data in events.order_by("seq").values_list("seq", "data")
    }


def _row(TurnAttempt, turn, archived, first_seq, last_seq):
    values = {name: archived[name] for name in _TEXT if archived.get(name) is not None}
    finished = archived.get("finished_at")
    return TurnAttempt(
        turn_id=turn.pk,
        number=int(archived["attempt"]),
        ended_by=archived.get("reason") or "retry",
        first_seq=first_seq,
        last_seq=last_seq,
        steps=int(archived.get("steps") or 0),
        max_steps=archived.get("max_steps"),
        usage=archived.get("usage") or {},
        timings=archived.get("timings") or {},
        review=archived.get("review"),
        trace=archived.get("trace") or [],
        failure_cause=archived.get("failure_cause"),
        failure_error=archived.get("failure_error"),
        finished_at=datetime.fromisoformat(finished) if finished else None,
        **values,
    )


def meta_to_rows(apps, schema_editor):
    Turn = apps.get_model("turns", "Turn")
    TurnAttempt = apps.get_model("turns", "TurnAttempt")
    TurnEvent = apps.get_model("turns", "TurnEvent")
    for turn in Turn.objects.filter(meta__has_key="attempts").iterator():
        ends = _ends(TurnEvent.objects.filter(turn_id=turn.pk, type="attempt.retry"))
        rows, first_seq = [], 1
        for archived in sorted(turn.meta.get("attempts") or [], key=lambda a: int(a["attempt"])):
            last_seq = ends.get(int(archived["attempt"]))
            rows.append(_row(TurnAttempt, turn, archived, first_seq, last_seq))
            first_seq = last_seq + 1 if last_seq is not None else None
        TurnAttempt.objects.bulk_create(rows)
        turn.meta = {k: v for k, v in turn.meta.items() if k != "attempts"}
        turn.save(update_fields=["meta"])


def rows_to_meta(apps, schema_editor):
    Turn = apps.get_model("turns", "Turn")
    TurnAttempt = apps.get_model("turns", "TurnAttempt")
    by_turn = {}
    for row in TurnAttempt.objects.order_by("turn_id", "number").iterator():
        archived = {
            "attempt": row.number,
            "reason": row.ended_by,
            **{name: getattr(row, name) for name in _ALWAYS},
            "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        }
        for name in _BY_REASON.get(row.ended_by, ()):
            archived[name] = getattr(row, name)
        if row.ended_by == "continue" and row.max_steps is not None:
            archived["max_steps"] = row.max_steps
        by_turn.setdefault(row.turn_id, []).append(archived)
    for turn in Turn.objects.filter(pk__in=list(by_turn)).iterator():
        turn.meta = {**turn.meta, "attempts": by_turn[turn.pk]}
        turn.save(update_fields=["meta"])
    TurnAttempt.objects.all().delete()


class Migration(migrations.Migration):

    dependencies = [
        ('turns', '0008_turn_attempt'),
    ]

    operations = [
        migrations.RunPython(meta_to_rows, rows_to_meta),
    ]
