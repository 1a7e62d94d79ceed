# Issue 40: an attempt of a turn is one row (TurnAttempt), not a dict in Turn.meta["attempts"].

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turns', '0007_turn_agent_options'),
    ]

    operations = [
        migrations.CreateModel(
            name='TurnAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField()),
                ('ended_by', models.CharField(choices=[('first', 'First'), ('review', 'Review'), ('retry', 'Retry'), ('continue', 'Continue')], max_length=16)),
                ('first_seq', models.PositiveIntegerField(blank=True, null=True)),
                ('last_seq', models.PositiveIntegerField(blank=True, null=True)),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('waiting', 'Waiting'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled'), ('interrupted', 'Interrupted')], max_length=16)),
                ('outcome', models.CharField(blank=True, choices=[('answered', 'Answered'), ('asked', 'Asked'), ('rejected', 'Rejected'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='', max_length=16)),
                ('stop_reason', models.CharField(blank=True, default='', max_length=32)),
                ('answer', models.TextField(blank=True, default='')),
                ('evidence', models.TextField(blank=True, default='')),
                ('reasoning', models.TextField(blank=True, default='')),
                ('clarifying_question', models.TextField(blank=True, default='')),
                ('question', models.TextField(blank=True, default='')),
                ('steps', models.PositiveIntegerField(default=0)),
                ('max_steps', models.PositiveIntegerField(blank=True, null=True)),
                ('usage', models.JSONField(blank=True, default=dict)),
                ('timings', models.JSONField(blank=True, default=dict)),
                ('review', models.JSONField(blank=True, null=True)),
                ('trace', models.JSONField(blank=True, default=list)),
                ('failure_cause', models.TextField(blank=True, null=True)),
                ('failure_error', models.TextField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('turn', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='attempt_rows', to='turns.turn')),
            ],
            options={
                'ordering': ['turn_id', 'number'],
                'constraints': [models.UniqueConstraint(fields=('turn', 'number'), name='turnattempt_unique_turn_number'), models.CheckConstraint(condition=models.Q(('number__gte', 1)), name='turnattempt_number_positive')],
            },
        ),
    ]
