"""Human review (issue 30; docs/architecture.md#annotation-queues): annotation
queues made from a run's predictions (``queues``), the held claim and the
labels with their history (``labelling``), labels from a CSV file
(``label_import``), the statistics (``agreement``: Cohen's and Fleiss' κ, the
sign test), human-verified accuracy, judge alignment and the pairwise result
(``alignment``), and corrected answers as a new dataset version
(``corrections``)."""
