"""The application's error hierarchy, mapped to HTTP once in the API (CONTRIBUTING.md#one-error-hierarchy)."""

from __future__ import annotations


class AgentLabError(Exception):
    """Base of every error the application raises on purpose."""

    status_code = 400


class NotFound(AgentLabError):
    """The object does not exist, or the caller may not see it."""

    status_code = 404


class StateConflict(AgentLabError):
    """The object's current state forbids the action (HTTP 409)."""

    status_code = 409


class BadInput(AgentLabError):
    """The input is malformed; the message says what and where."""

    status_code = 400
