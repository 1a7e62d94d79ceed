"""The framework-free agent core: LLM providers, tools and the agent loop.

No Django in here (CONTRIBUTING.md#the-agent-core-has-no-django): ``import agentlab.agent`` works without
settings and without the optional ``local`` extra (llama-cpp-python).

Importing the package imports only the plain types (``types``, ``usage``): the
loop, the providers (the OpenAI SDK), the tools and the retry policy behind the
other public names are imported when a name is first read (``agentlab.agent.lazy``),
so the settings' ``agentlab.agent.mcp.config`` costs no SDK (issue 32).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlab.agent.lazy import exports_of, lazy_export
from agentlab.agent.types import (
    STOP_REASONS,
    Completion,
    LLMProvider,
    ProviderError,
    Step,
    StopReason,
    ToolCall,
    ToolResult,
    Usage,
    as_text,
)
from agentlab.agent.usage import UsageTotals

if TYPE_CHECKING:
    from agentlab.agent.loop import AgentLoop, ApprovalDecision, ApprovalGate, LoopResult
    from agentlab.agent.protocol import DEFAULT_SYSTEM_PROMPT, parse_tool_calls
    from agentlab.agent.providers import make_provider
    from agentlab.agent.providers.openai_compat import OpenAICompatibleProvider
    from agentlab.agent.providers.scripted import ScriptedProvider
    from agentlab.agent.reports import CompletionReport, OnReport, Report, ToolResultReport
    from agentlab.agent.retry import complete_with_retries
    from agentlab.agent.tools import Tool, ToolContext, ToolRegistry, default_registry, evaluate_expression

_EXPORTS = {
    **exports_of(
        "agentlab.agent.loop",
        "AgentLoop",
        "ApprovalDecision",
        "ApprovalGate",
        "LoopResult",
    ),
    **exports_of("agentlab.agent.reports", "CompletionReport", "OnReport", "Report", "ToolResultReport"),
    **exports_of("agentlab.agent.protocol", "DEFAULT_SYSTEM_PROMPT", "parse_tool_calls"),
    **exports_of("agentlab.agent.providers", "make_provider"),
    **exports_of("agentlab.agent.providers.openai_compat", "OpenAICompatibleProvider"),
    **exports_of("agentlab.agent.providers.scripted", "ScriptedProvider"),
    **exports_of("agentlab.agent.retry", "complete_with_retries"),
    **exports_of(
        "agentlab.agent.tools",
        "Tool",
        "ToolContext",
        "ToolRegistry",
        "default_registry",
        "evaluate_expression",
    ),
}


def __getattr__(name: str) -> Any:
    return lazy_export(__name__, _EXPORTS, name)


__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "STOP_REASONS",
    "AgentLoop",
    "ApprovalDecision",
    "ApprovalGate",
    "Completion",
    "CompletionReport",
    "LLMProvider",
    "LoopResult",
    "OnReport",
    "OpenAICompatibleProvider",
    "ProviderError",
    "Report",
    "ScriptedProvider",
    "Step",
    "StopReason",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolResultReport",
    "Usage",
    "UsageTotals",
    "as_text",
    "complete_with_retries",
    "default_registry",
    "evaluate_expression",
    "make_provider",
    "parse_tool_calls",
]
