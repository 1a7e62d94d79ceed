"""The agent packages' public names resolve on first use (``agentlab.agent.lazy``):
every name a package lists in ``__all__`` is the object its module defines, and
importing the settings' ``agentlab.agent.mcp.config`` imports none of them."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentlab.agent.lazy import exports_of, lazy_export

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("agentlab.agent", "agentlab.agent.mcp", "agentlab.agent.plugins", "agentlab.agent.providers")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_of_a_package_resolves(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert set(module.__all__) <= set(namespace)


def test_a_lazy_name_is_its_module_s_object_and_an_unknown_one_is_an_attribute_error():
    import agentlab.agent
    import agentlab.agent.plugins
    from agentlab.agent.loop import AgentLoop
    from agentlab.agent.tools import schema_tool

    assert agentlab.agent.AgentLoop is AgentLoop
    assert agentlab.agent.plugins.plugin_tool is schema_tool  # a renamed export
    with pytest.raises(AttributeError, match=r"'agentlab\.agent' has no attribute 'NoSuchName'"):
        agentlab.agent.NoSuchName  # noqa: B018
    with pytest.raises(AttributeError):
        lazy_export("agentlab.agent", exports_of("agentlab.agent.loop", "AgentLoop"), "Missing")


def test_the_settings_mcp_config_imports_no_sdk_tool_or_hub():
    script = textwrap.dedent(
        """
        import sys
        import agentlab.agent.mcp.config
        heavy = ("openai", "mcp", "aiohttp", "pydantic", "agentlab.agent.tools", "agentlab.agent.mcp.hub",
                 "agentlab.agent.loop", "agentlab.agent.providers")
        print(sorted(name for name in sys.modules if name.split(".")[0] in heavy or name in heavy))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
