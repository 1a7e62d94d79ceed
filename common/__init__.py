"""Django-aware helpers every app shares: the error hierarchy, database threads,
management-command plumbing and the code version. Imports nothing from the apps or
from the Django wiring in ``agentlab`` (import-linter checks it)."""
