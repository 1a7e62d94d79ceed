"""``run_eval``'s progress: a bar on a terminal, a plain line every few
seconds otherwise (a cron job's or a systemd unit's log has no terminal, and a
bar redrawn with carriage returns is noise there)."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import IO, Protocol

from tqdm import tqdm


class PlainProgress:
    """Writes ``run ID: N/TOTAL examples done (P %), S s, R ex/s`` (and
    ``, K in flight, oldest A s`` while examples run) to ``stream`` every
    ``every_s`` seconds — ``update(0)`` ticks it while none finishes — and
    once more when closed unless that count was just written (the run id
    quoted for a shell, as everywhere). ``clock``: seconds, monotonic (tests
    pass their own)."""

    def __init__(
        self,
        run_id: str,
        total: int,
        *,
        stream: IO[str],
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_id, self.total, self.stream, self.every_s, self.clock = run_id, total, stream, every_s, clock
        self.done = 0
        self.started = self.last = clock()
        self.closed = False
        #: the ``done`` count of the last line written (``None``: none yet)
        self.written: int | None = None
        #: examples started and not done: key -> when it started (``clock``)
        self.in_flight: dict[object, float] = {}

    def line(self) -> str:
        """The progress line for now; with examples in flight (``begin``) it
        says how many and how long the oldest has run: ``…, 3 in flight,
        oldest 122 s``."""
        now = self.clock()
        elapsed = now - self.started
        percent = 100.0 * self.done / self.total if self.total else 100.0
        rate = f"{self.done / elapsed:.2f}" if elapsed > 0 else "-"
        flight = ""
        if self.in_flight:
            flight = f", {len(self.in_flight)} in flight, oldest {now - min(self.in_flight.values()):.0f} s"
        return (
            f"run {shlex.quote(self.run_id)}: {self.done}/{self.total} examples done ({percent:.0f} %), "
            f"{elapsed:.0f} s, {rate} ex/s{flight}"
        )

    def begin(self, key: object) -> None:
        """Example ``key`` started (its clock runs until ``end``)."""
        self.in_flight[key] = self.clock()

    def end(self, key: object) -> None:
        """Example ``key`` is no longer in flight."""
        self.in_flight.pop(key, None)

    def update(self, n: int = 1) -> None:
        """``n`` more examples are done (0: none, a tick); writes a line when
        ``every_s`` has passed since the last — so a line comes every
        ``every_s`` even while no example finishes."""
        self.done += n
        if self.clock() - self.last >= self.every_s:
            self._write()

    def _write(self) -> None:
        self.last, self.written = self.clock(), self.done
        self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Write the last line (once; not again when it was just written)."""
        if not self.closed:
            self.closed = True
            if self.written != self.done:
                self._write()


def progress_for(stream: IO[str], *, every_s: float) -> Callable[[str, int], Progress]:
    """The progress factory of ``run_eval`` writing to ``stream``: a ``tqdm``
    bar when it is a terminal, else ``PlainProgress`` lines every ``every_s`` s."""

    def make(run_id: str, total: int) -> Progress:
        if stream.isatty():
            return tqdm(total=total, desc=run_id, unit="ex", file=stream)
        return PlainProgress(run_id, total, stream=stream, every_s=every_s)

    return make


class Progress(Protocol):
    """A progress bar (``tqdm`` has this shape)."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


#: ``(run id, examples to drive) -> Progress``: the bar of one run.
ProgressFactory = Callable[[str, int], Progress]
