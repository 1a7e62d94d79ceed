"""Test helpers that ship with AgentLab (no Django): a stub OpenAI-compatible server."""
