"""Comparing two runs on one dataset, and gating on a regression.

- ``pairing``: pairing the runs' predictions by example into a typed
  ``Comparison`` (pure);
- ``statistics``: McNemar's exact test and the other counts-based statistics;
- ``bootstrap``: the paired bootstrap for runs with epochs;
- ``over_epochs``: the comparison over per-example mean scores (epochs);
- ``comparison_table``: the plain-text tables ``compare_runs`` prints;
- ``gate``: ``run_eval --baseline … --fail-on-regression`` — the comparison
  with a baseline and the exit code it decides;
- ``services``: loading both runs and building the comparison.
"""
