# Issue 40: why an attempt started (TurnAttempt.reason): "first", else what ended the attempt before it.

from django.db import migrations, models


def reasons_from_previous(apps, schema_editor):
    TurnAttempt = apps.get_model("turns", "TurnAttempt")
    previous = {}
    changed = []
    for row in TurnAttempt.objects.order_by("turn_id", "number").iterator():
        ended = previous.get((row.turn_id, row.number - 1))
        if ended is not None:
            row.reason = ended
            changed.append(row)
        previous[(row.turn_id, row.number)] = row.ended_by
    TurnAttempt.objects.bulk_update(changed, ["reason"], batch_size=500)


class Migration(migrations.Migration):

    dependencies = [
        ('turns', '0009_attempts_from_meta'),
    ]

    operations = [
        migrations.AddField(
            model_name='turnattempt',
            name='reason',
            field=models.CharField(choices=[('first', 'First'), ('review', 'Review'), ('retry', 'Retry'), ('continue', 'Continue')], default='first', max_length=16),
        ),
        migrations.RunPython(reasons_from_previous, migrations.RunPython.noop),
    ]
