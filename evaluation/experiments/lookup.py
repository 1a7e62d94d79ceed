"""Finding an experiment by the name (or slug) a user types: the
leaderboard command, the API and the admin look it up here, and an unknown
name is an error that names the known ones."""

from __future__ import annotations

import difflib

from common.errors import NotFound
from evaluation.models import Experiment

__all__ = ["experiment_get"]


def experiment_get(name: str) -> Experiment:
    """The experiment named ``name`` (or, failing that, whose slug is
    ``name``). Raises ``NotFound`` naming the known experiments (and the
    nearest name), or saying there are none yet."""
    experiment = (
        Experiment.objects.select_related("dataset").filter(name=name).first()
        or Experiment.objects.select_related("dataset").filter(slug=name).first()
    )
    if experiment is not None:
        return experiment
    known = list(Experiment.objects.order_by("name").values_list("name", flat=True)[:200])
    if not known:
        raise NotFound(
            f"no experiment named {name!r}: there are no experiments yet "
            "(manage.py run_experiment FILE.toml makes one)"
        )
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    shown = ", ".join(repr(k) for k in known[:20]) + (", …" if len(known) > 20 else "")
    raise NotFound(f"no experiment named {name!r}; {hint}known experiments: {shown}")
