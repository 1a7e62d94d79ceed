"""The framework-free agent core: LLM providers, tools and the agent loop.

No Django in here (CONTRIBUTING.md#the-agent-core-has-no-django): ``import agentlab.agent`` works without
settings and without the optional ``local`` extra (llama-cpp-python).
"""

from __future__ import annotations

from agentlab.agent.loop import (
    AgentLoop,
    ApprovalDecision,
    ApprovalGate,
    CompletionReport,
    LoopResult,
    OnReport,
    Report,
    ToolResultReport,
)
from agentlab.agent.protocol import DEFAULT_SYSTEM_PROMPT, parse_tool_calls
from agentlab.agent.providers import OpenAICompatibleProvider, ScriptedProvider, make_provider
from agentlab.agent.retry import complete_with_retries
from agentlab.agent.tools import Tool, ToolContext, ToolRegistry, default_registry, evaluate_expression
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
