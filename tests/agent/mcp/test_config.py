"""MCP server settings (agentlab/agent/mcp/config.py). No Django, no SDK."""

from __future__ import annotations

import pytest

from agentlab.agent.mcp import MCPConfigError, parse_server_option, parse_servers


def test_text_values_are_a_url_or_a_command_line():
    http, stdio = parse_servers(
        '{"search": "http://127.0.0.1:9000/mcp", "files": "python -m srv --root \'/a b\'"}'
    )

    assert (http.name, http.transport, http.url, http.command) == (
        "search",
        "streamable-http",
        "http://127.0.0.1:9000/mcp",
        None,
    )
    assert (stdio.transport, stdio.command) == ("stdio", ("python", "-m", "srv", "--root", "/a b"))


def test_objects_carry_env_approval_tools_and_timeouts():
    (shell,) = parse_servers(
        {
            "shell": {
                "command": ["uvx", "mcp-shell"],
                "args": ["--safe"],
                "env": {"TOKEN": "secret"},
                "approval": ["run"],
                "tools": ["run", "ls"],
                "timeout_s": 5,
            }
        }
    )

    assert shell.command == ("uvx", "mcp-shell", "--safe")
    assert shell.needs_approval("run") and not shell.needs_approval("ls")
    assert shell.offers("ls") and not shell.offers("rm")
    assert shell.timeout_s == 5.0
    # the snapshot keeps env's names, never its values
    assert shell.describe() == {
        "name": "shell",
        "transport": "stdio",
        "target": "uvx mcp-shell --safe",
        "env": ["TOKEN"],
        "approval": ["run"],
        "tools": ["ls", "run"],
        "timeout_s": 5.0,
    }


def test_approval_true_covers_every_tool_of_the_server():
    (server,) = parse_servers({"s": {"url": "https://mcp.example.com/mcp", "approval": True}})

    assert server.needs_approval("anything")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[1, 2]", "AGENTLAB_MCP_SERVERS must be a JSON object"),
        ("{not json", "AGENTLAB_MCP_SERVERS must be a JSON object"),
        ('{"a b": "x"}', "server name 'a b' must be 1-32 letters"),
        ('{"s": ""}', "server 's': empty"),
        ('{"s": {"command": "x", "url": "http://h/mcp"}}', "exactly one of 'command' (stdio) and 'url'"),
        ('{"s": {"comand": "x"}}', "server 's': unknown keys ['comand']"),
        ('{"s": {"url": "ftp://h"}}', "server 's': url must be an http:// or https:// URL"),
        (
            '{"s": {"url": "http://h/mcp", "env": {"A": "1"}}}',
            "'args', 'env' and 'cwd' are for a stdio command",
        ),
        ('{"s": {"command": "x", "env": {"A": 1}}}', "server 's': env must be an object of strings"),
        ('{"s": {"command": "x", "approval": "yes"}}', "server 's': approval (true, false or tool names)"),
        ('{"s": {"command": "x", "timeout_s": 0}}', "server 's': timeout_s must be a number of seconds"),
        ('{"s": {"command": "x \'unclosed"}}', "server 's': command \"x 'unclosed\" cannot be split"),
    ],
)
def test_bad_settings_are_errors_naming_the_server_and_key(value, message):
    with pytest.raises(MCPConfigError) as caught:
        parse_servers(value)

    assert message in str(caught.value)


def test_empty_setting_is_no_server():
    assert parse_servers("") == [] and parse_servers(None) == []


def test_command_line_option_takes_name_equals_spec():
    assert parse_server_option("docs=http://127.0.0.1:1/mcp").url == "http://127.0.0.1:1/mcp"
    assert parse_server_option('docs={"command": ["srv"], "approval": true}').approval is True
    with pytest.raises(MCPConfigError, match="--mcp 'docs': expected NAME=URL"):
        parse_server_option("docs")
