"""The test suite's ``count`` tool as a plugin (entry point ``count``):
``AGENTLAB_PLUGINS=count`` offers it to every turn of a process.

End-to-end tests start daphne and Celery workers in processes they share no
memory with and count the tool's side effects in a file
(``agentlab.testing.count_tool``). The tool reaches those turns the way any
plugin's tools do, so AgentLab itself never imports test code.
"""

from __future__ import annotations

from agentlab.agent.plugins import hookimpl
from agentlab.testing.count_tool import count_tool


@hookimpl
def agentlab_tools(context):
    return [count_tool()]
