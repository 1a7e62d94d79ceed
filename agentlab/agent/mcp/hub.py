"""One process's MCP client sessions: started lazily, reused, closed on shutdown.

The official SDK's ``mcp.Client`` is an async context manager built on anyio
task groups: it belongs to the event loop — and the task — that entered it.
Turns, though, run on many loops: the inline executor has one, ``run_eval``
another, and a Celery worker thread runs each task under its own
``asyncio.run``. A session per turn loop would start a stdio server per
Celery task. So each process has one ``MCPHub``: a daemon thread running one
event loop that owns one client session per server; a turn on any loop calls
through it (``asyncio.run_coroutine_threadsafe``) and awaits the answer on its
own loop. A server is started at its first use (stdio: one child process per
worker process), its tools listed once, and the session reused by every turn
of the process until ``close()`` (registered with ``atexit``; Django wiring
also calls it at worker shutdown).

Failures (docs/extending.md, CONTRIBUTING.md#classified-failures):

- a server that cannot be started or reached, or does not list its tools
  within ``start_timeout_s``, raises ``MCPUnavailable`` — the driver fails the
  turn when that happens before it starts;
- a call whose connection dies (the server crashed, the URL stopped
  answering) raises ``MCPCallError``, which the tool turns into a tool error
  the model sees; the session is retired and the next call starts the server
  again. A call is never sent twice: it may have run.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from agentlab.agent.mcp.config import MCPServerConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The ``_meta`` key under which a call carries AgentLab's idempotency key
#: (turn id + tool call id): a server with side effects may deduplicate by it.
IDEMPOTENCY_META_KEY = "agentlab/idempotency-key"


class MCPUnavailable(Exception):
    """An MCP server could not be started or reached, or did not list its tools."""


class MCPCallError(Exception):
    """A call to an MCP server failed outside the tool: the connection died,
    the server did not answer in time or refused the request."""


@dataclass(frozen=True)
class RemoteTool:
    """A tool as an MCP server lists it; ``read_only``: its ``readOnlyHint``
    annotation (the MCP specification's: it does not modify its environment)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False


@dataclass(frozen=True)
class CallOutcome:
    """What a call returned: the text for the model and whether the tool
    reported an error (``isError``)."""

    text: str
    is_error: bool


def _describe(exc: BaseException) -> str:
    """The innermost cause of ``exc``, through anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as text: its text blocks; for other blocks a note
    (``[image image/png]``, a resource's text or URI); the structured content
    as JSON when there is no text at all."""
    import json

    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


async def _listing(client: Any, *, refresh: bool) -> list[RemoteTool]:
    """Every tool the server lists, page by page (at most 100 pages: a
    paginator that never ends cannot hang a turn)."""
    tools: list[RemoteTool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh" if refresh else "use")
        tools += [
            RemoteTool(
                t.name,
                t.description or "",
                dict(t.input_schema),
                read_only=bool(getattr(t.annotations, "read_only_hint", None)),
            )
            for t in page.tools
        ]
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


class _Connection:
    """One client session, on the hub's loop, for as long as its task runs."""

    def __init__(self, config: MCPServerConfig) -> None:
        self.config = config
        self.errlog: IO[str] | None = None
        self.client: Any = None
        self.tools: list[RemoteTool] = []
        self.ready: asyncio.Future[list[RemoteTool]] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp-{config.name}")

    def _target(self) -> Any:
        """The URL, or the stdio transport: ``python``/``python3`` as the
        program is the interpreter running AgentLab (so ``python -m pkg``
        finds the packages of AgentLab's virtualenv, activated or not); the
        environment is the MCP SDK's safe default (``HOME``, ``PATH``, …),
        the parent's variables ``inherit_env`` names, and ``env``; the
        child's stderr is kept in a file, to say why it failed to start."""
        from mcp.client.stdio import StdioServerParameters, stdio_client

        config = self.config
        if config.command is None:
            return config.url
        program, *args = config.command
        if program in ("python", "python3"):
            program = sys.executable
        inherited = (
            dict(os.environ)
            if config.inherit_env is True
            else {name: os.environ[name] for name in config.inherit_env or () if name in os.environ}
        )
        self.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - kept open
        params = StdioServerParameters(
            command=program, args=args, env={**inherited, **dict(config.env)} or None, cwd=config.cwd
        )
        return stdio_client(params, errlog=self.errlog)

    def last_error_line(self) -> str:
        """The last non-blank line the child wrote to stderr, ``""`` if none."""
        if self.errlog is None:
            return ""
        try:
            self.errlog.flush()
            self.errlog.seek(0)
            lines = [line.strip() for line in self.errlog.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1] if lines else ""

    async def _run(self) -> None:
        from mcp import Client
        from mcp.types import Implementation

        try:
            client = Client(
                self._target(),
                read_timeout_seconds=self.config.timeout_s,
                client_info=Implementation(name="agentlab", version="1"),
            )
            async with client:
                tools = await _listing(client, refresh=False)
                self.client, self.tools = client, tools
                self.ready.set_result(tools)
                await self.stop.wait()
        except asyncio.CancelledError:
            if not self.ready.done():
                self.ready.set_exception(MCPUnavailable(self._unavailable("its start was cancelled")))
            raise
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(MCPUnavailable(self._unavailable(_describe(exc))))
            else:
                logger.warning("MCP server %s: session ended: %s", self.config.name, _describe(exc))
        finally:
            self.client = None
            if self.errlog is not None:  # read by _unavailable above, if at all
                self.errlog.close()

    def _unavailable(self, cause: str) -> str:
        config = self.config
        said = self.last_error_line()
        child = f"; it said: {said}" if said else ""
        return (
            f"MCP server {config.name!r} ({config.transport} {config.target}) is unavailable: {cause}{child}"
        )

    def retire(self) -> None:
        self.stop.set()


class MCPHub:
    """See the module docstring. Thread-safe; every coroutine method may be
    awaited on any event loop. ``starts`` counts sessions started per server
    name (a test's "started once")."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[MCPServerConfig, _Connection] = {}
        self._pid = os.getpid()
        self.starts: collections.Counter[str] = collections.Counter()

    # --- the hub's loop -------------------------------------------------------------

    def _hub_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._loop, self._thread, self._connections = None, None, {}
                self._pid = os.getpid()
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agentlab-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _on_hub(self, make: Callable[[], Awaitable[T]]) -> T:
        loop = self._hub_loop()
        future = asyncio.run_coroutine_threadsafe(_awaited(make), loop)
        # cancelling the caller cancels the hub's task too (wrap_future does)
        return await asyncio.wrap_future(future)

    async def _connection(self, config: MCPServerConfig) -> _Connection:
        """On the hub's loop: the live session of ``config``, started if needed."""
        connection = self._connections.get(config)
        if connection is None or connection.task.done() or connection.stop.is_set():
            connection = _Connection(config)
            self._connections[config] = connection
            self.starts[config.name] += 1
        try:
            await asyncio.wait_for(asyncio.shield(connection.ready), config.start_timeout_s)
        except TimeoutError:
            self._drop(connection)
            connection.task.cancel()
            raise MCPUnavailable(
                connection._unavailable(f"no tool list within {config.start_timeout_s:g} s")
            ) from None
        except MCPUnavailable:
            self._drop(connection)
            raise
        return connection

    def _drop(self, connection: _Connection) -> None:
        if self._connections.get(connection.config) is connection:
            del self._connections[connection.config]
        connection.retire()

    # --- what turns call ---------------------------------------------------------------

    async def list_tools(self, config: MCPServerConfig) -> list[RemoteTool]:
        """The server's tools, asked afresh (a turn starts with the server's
        current tools, and a session that died while idle is found here, not
        at the turn's first call); starts the server if needed, and once
        more when the live session does not answer. Raises ``MCPUnavailable``."""

        async def run() -> list[RemoteTool]:
            fresh = config not in self._connections
            connection = await self._connection(config)
            if fresh:
                return list(connection.tools)
            try:
                connection.tools = await asyncio.wait_for(
                    _listing(connection.client, refresh=True), config.start_timeout_s
                )
                return list(connection.tools)
            except Exception as exc:  # timeouts included
                logger.warning(
                    "MCP server %s: the session did not answer (%s); starting it again",
                    config.name,
                    _describe(exc),
                )
                self._drop(connection)
            return list((await self._connection(config)).tools)

        return await self._on_hub(run)

    async def call_tool(
        self,
        config: MCPServerConfig,
        name: str,
        arguments: dict[str, Any],
        *,
        idempotency_key: str | None = None,
    ) -> CallOutcome:
        """Call the server's tool ``name`` (its own name) once.

        Raises ``MCPUnavailable`` (the server cannot be started again) or
        ``MCPCallError`` (the call failed outside the tool; a dead session
        is retired first, so the next call starts the server again).
        """

        async def run() -> CallOutcome:
            from mcp import MCPError
            from mcp.types import CONNECTION_CLOSED

            connection = await self._connection(config)
            meta = {IDEMPOTENCY_META_KEY: idempotency_key} if idempotency_key else None
            where = f"MCP server {config.name!r}"
            try:
                result = await asyncio.wait_for(
                    connection.client.call_tool(name, arguments, meta=meta), config.timeout_s + 5
                )
            except TimeoutError:
                raise MCPCallError(f"{where} did not answer {name} within {config.timeout_s:g} s") from None
            except MCPError as exc:
                if exc.code != CONNECTION_CLOSED:
                    raise MCPCallError(f"{where} refused {name}: {exc.message}") from None
                self._drop(connection)
                raise MCPCallError(
                    f"{where} closed the connection during {name} (it may have crashed); "
                    "it is started again at the next call"
                ) from None
            except Exception as exc:
                self._drop(connection)
                raise MCPCallError(
                    f"{where} failed during {name}: {_describe(exc)}; it is started again at the next call"
                ) from None
            return CallOutcome(text=result_text(result), is_error=bool(result.is_error))

        return await self._on_hub(run)

    def close(self, timeout: float = 15.0) -> None:
        """Close every session (stdio servers are stopped: stdin closed, then
        terminated) and stop the hub's thread. Idempotent; the hub starts again
        if used afterwards. Must not be called from the hub's own loop."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or self._pid != os.getpid():
            return

        async def close_all() -> None:
            connections = list(self._connections.values())
            self._connections.clear()
            for connection in connections:
                connection.retire()
            await asyncio.gather(*(c.task for c in connections), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(close_all(), loop).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            logger.warning("MCP hub: sessions did not close within %s s", timeout)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout)
        if not loop.is_running():
            loop.close()


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


_hub: MCPHub | None = None
_hub_lock = threading.Lock()


def mcp_hub() -> MCPHub:
    """The process's hub (created on first use; closed at exit)."""
    global _hub
    with _hub_lock:
        if _hub is None:
            _hub = MCPHub()
            atexit.register(_hub.close)
        return _hub


def mcp_hub_close() -> None:
    """Close the process's hub if it was ever used (shutdown hooks call this)."""
    with _hub_lock:
        hub = _hub
    if hub is not None:
        hub.close()
