"""Conversations, turns, the per-turn event log, approvals and the turn driver."""
