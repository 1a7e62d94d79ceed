"""Conformance of AgentLab's scorers and statistics with the references the
field cites: each module ports a reference's own functions (file, function
and commit cited), generates answer variants from the shared datasets and
checks that AgentLab agrees on every case except the documented deviations
(docs/evaluating.md#where-agentlab-differs-from-the-references)."""
