"""Datasets, examples, evaluation runs and predictions; scoring and metrics."""
