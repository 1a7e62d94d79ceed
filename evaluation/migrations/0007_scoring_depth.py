"""Scoring depth (issue 16): a dataset's default scorer and judge rubric,
predictions per epoch (unique per run, example and epoch) with the scorer's
explanation and the judge's grading, the judge's cache, and the run a
re-scored run came from."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("evaluation", "0006_gold_answer_json_prediction_usage")]

    operations = [
        migrations.AddField(
            "dataset", "scorer", models.CharField(blank=True, default="", max_length=32)
        ),
        migrations.AddField("dataset", "rubric", models.TextField(blank=True, default="")),
        migrations.AddField(
            "run",
            "rescored_from",
            models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="rescores",
                to="evaluation.run",
            ),
        ),
        migrations.AddField("prediction", "epoch", models.PositiveIntegerField(default=1)),
        migrations.AddField("prediction", "score_explanation", models.TextField(blank=True, default="")),
        migrations.AddField("prediction", "judgement", models.JSONField(blank=True, default=dict)),
        migrations.RemoveConstraint("prediction", "prediction_unique_run_example"),
        migrations.AddConstraint(
            "prediction",
            models.UniqueConstraint(
                fields=("run", "example", "epoch"), name="prediction_unique_run_example_epoch"
            ),
        ),
        migrations.AlterModelOptions(
            "prediction", options={"ordering": ["run_id", "example__position", "epoch"]}
        ),
        migrations.CreateModel(
            name="JudgeCacheEntry",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key", models.CharField(max_length=64, unique=True)),
                ("model", models.CharField(max_length=200)),
                ("grade", models.CharField(max_length=16)),
                ("value", models.FloatField()),
                ("explanation", models.TextField(blank=True, default="")),
                ("usage", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
