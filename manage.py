#!/usr/bin/env python
"""Django's command-line utility for AgentLab."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # a bad setting (config/settings.py names the variable): one line
        # and exit 2, the code the commands use for bad input
        sys.stderr.write(f"configuration error: {exc}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
