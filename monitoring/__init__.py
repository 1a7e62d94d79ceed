"""Online evaluation of chat turns: evaluators that score a sample of finished
chat turns off the turn's path, their trend and the alert on a drop
(docs/monitoring.md; docs/architecture.md#the-package-map)."""
