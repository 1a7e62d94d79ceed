"""Datasets: reading JSONL files into examples, the built-in demo dataset, and
registering them as ``Dataset`` and ``Example`` rows.

- ``jsonl``: parse a dataset file into plain ``ExampleSpec`` values (no Django);
  how a gold answer is shown.
- ``demo``: the eight-example demo dataset ``run_eval demo`` uses.
- ``services``: ``dataset_import`` and ``dataset_resolve`` (the writes).
"""
