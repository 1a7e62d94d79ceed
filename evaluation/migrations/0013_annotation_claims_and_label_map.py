# Issue 47: a queue item's count of current labels (the claim's condition) and a queue's label map.

from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce


def count_labels(apps, schema_editor):
    """Fill ``label_count`` from the current labels already stored."""
    QueueItem = apps.get_model("evaluation", "QueueItem")
    HumanLabel = apps.get_model("evaluation", "HumanLabel")
    counts = (
        HumanLabel.objects.filter(item_id=OuterRef("pk"), current=True)
        .order_by()
        .values("item_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    QueueItem.objects.update(label_count=Coalesce(Subquery(counts), Value(0)))


class Migration(migrations.Migration):
    dependencies = [
        ("evaluation", "0012_annotation_queues"),
    ]

    operations = [
        migrations.AddField(
            model_name="annotationqueue",
            name="label_map",
            field=models.JSONField(
                blank=True, default=dict, help_text="own label → correct/partial/incorrect"
            ),
        ),
        migrations.AddField(
            model_name="queueitem",
            name="label_count",
            field=models.PositiveIntegerField(
                default=0, help_text="current labels: the claim's overlap test"
            ),
        ),
        migrations.RunPython(count_labels, migrations.RunPython.noop),
    ]
