# The tool.started event type: written before a tool runs (idempotency after a crash).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turns', '0004_event_type_llm_delta'),
    ]

    operations = [
        migrations.AlterField(
            model_name='turnevent',
            name='type',
            field=models.CharField(choices=[('turn.queued', 'Turn Queued'), ('turn.started', 'Turn Started'), ('phase', 'Phase'), ('thinking', 'Thinking'), ('llm.delta', 'Llm Delta'), ('llm.usage', 'Llm Usage'), ('tool.call', 'Tool Call'), ('tool.started', 'Tool Started'), ('tool.result', 'Tool Result'), ('check', 'Check'), ('approval.requested', 'Approval Requested'), ('approval.resolved', 'Approval Resolved'), ('review', 'Review'), ('attempt.retry', 'Attempt Retry'), ('turn.answered', 'Turn Answered'), ('turn.asked', 'Turn Asked'), ('turn.failed', 'Turn Failed'), ('turn.cancelled', 'Turn Cancelled'), ('turn.interrupted', 'Turn Interrupted'), ('turn.resumed', 'Turn Resumed')], max_length=32),
        ),
    ]
