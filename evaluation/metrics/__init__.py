"""A run's metrics: pure aggregation over plain prediction rows, and how they
are shown.

- ``compute``: ``compute_metrics`` — accuracy (errored counts as wrong,
  unscored apart), latency, tokens, cost, review outcomes;
- ``intervals``: confidence intervals for the accuracies shown;
- ``epochs``: the metrics of a run whose examples ran several times;
- ``checks``: how plugins' checks fared over a run;
- ``metrics_table``: the plain-text table ``run_eval`` prints;
- ``report_data``: the data of the report page and the comparison charts.
"""
