"""Experiments: one dataset, many variants of the agent, each a run, and
their leaderboard (docs/architecture.md#experiments)."""
