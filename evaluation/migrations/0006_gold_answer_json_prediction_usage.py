"""Gold answers become JSON (a string, or a list of aliases); predictions keep
the turn's labelled usage and a note when the answer's type did not fit.

The text columns are copied into new JSON columns rather than altered in
place: PostgreSQL would cast ``"C"`` to jsonb and fail, and ``"18"`` would
become the number 18 — every stored answer stays the string it was.
"""

from __future__ import annotations

from django.db import migrations, models


def _to_json(apps, schema_editor):  # type: ignore[no-untyped-def]
    Example = apps.get_model("evaluation", "Example")
    Prediction = apps.get_model("evaluation", "Prediction")
    for example in Example.objects.only("pk", "answer").iterator():
        Example.objects.filter(pk=example.pk).update(answer_json=example.answer)
    for prediction in Prediction.objects.only("pk", "gold_answer").iterator():
        Prediction.objects.filter(pk=prediction.pk).update(gold_answer_json=prediction.gold_answer)


def _to_text(apps, schema_editor):  # type: ignore[no-untyped-def]
    import json

    Example = apps.get_model("evaluation", "Example")
    Prediction = apps.get_model("evaluation", "Prediction")

    def text(value):  # type: ignore[no-untyped-def]
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    for example in Example.objects.only("pk", "answer_json").iterator():
        Example.objects.filter(pk=example.pk).update(answer=text(example.answer_json))
    for prediction in Prediction.objects.only("pk", "gold_answer_json").iterator():
        Prediction.objects.filter(pk=prediction.pk).update(gold_answer=text(prediction.gold_answer_json))


class Migration(migrations.Migration):
    dependencies = [("evaluation", "0005_dataset_plugins")]

    operations = [
        migrations.AddField("example", "answer_json", models.JSONField(default=str)),
        migrations.AddField("prediction", "gold_answer_json", models.JSONField(blank=True, default=str)),
        migrations.RunPython(_to_json, _to_text),
        migrations.RemoveField("example", "answer"),
        migrations.RemoveField("prediction", "gold_answer"),
        migrations.RenameField("example", "answer_json", "answer"),
        migrations.RenameField("prediction", "gold_answer_json", "gold_answer"),
        migrations.AddField("prediction", "usage", models.JSONField(blank=True, default=dict)),
        migrations.AddField(
            "prediction", "answer_mismatch", models.CharField(blank=True, default="", max_length=200)
        ),
    ]
