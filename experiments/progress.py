"""Progress of long work for people: bars on a terminal, one plain line per finished unit elsewhere."""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm


class UnitProgress:
    """Units of work done out of ``total``. On a terminal: a tqdm bar. Otherwise (a log file, a CI
    job, a notebook's captured output): one line per finished unit on stderr, so progress is
    still visible without a bar's control characters. ``enabled=False`` says nothing at all but
    what must be said (a resumed run's units found done, an interruption)."""

    def __init__(self, total: int, desc: str, enabled: bool = True, stream=None, leave: bool = True,
                 estimate: bool = False, expected_ends: dict[str, float] | None = None):
        """``estimate``: say the time left after each unit, from the time so far: the units not done counted as
        equals, or, with ``expected_ends`` (each unit's expected end by its label, in seconds from the start:
        from an earlier run's times), the expected whole scaled by how far behind or ahead of its expected end
        the unit ended."""
        self.total, self.desc, self.enabled, self.estimate = total, desc, enabled, estimate
        self.ends = expected_ends or {}
        self.stream = stream or sys.stderr
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.bar = tqdm(total=total, desc=desc, unit="unit", file=self.stream, disable=not self.tty, leave=leave)
        self.done = 0
        self.t0 = time.perf_counter()

    def say(self, text: str) -> None:
        """A line that is always shown (tqdm-safe on a terminal)."""
        if self.tty:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def found(self, n: int, where) -> None:
        if n:
            self.say(f"resuming: {n} of {self.total} {self.desc} already done in {where}")
            self.done += n
            self.bar.update(n)

    def skip(self, n: int) -> None:
        """Count ``n`` units done earlier without a line each (the caller says it once)."""
        self.done += n
        self.bar.update(n)

    def postfix(self, text: str) -> None:
        if self.tty:
            self.bar.set_postfix_str(text)

    def update(self, n: int = 1, label: str = "") -> None:
        self.done += n
        self.bar.update(n)
        if self.enabled and not self.tty:
            elapsed = time.perf_counter() - self.t0
            if self.ends.get(label, 0) > 0:  # the expected whole at the pace this unit kept
                left_s = max(self.ends.values()) * elapsed / self.ends[label] - elapsed
            else:
                left_s = elapsed / self.done * (self.total - self.done) if self.done else 0.0
            left = (f"; about {max(left_s, 0):.0f} s left" if self.estimate and 0 < self.done < self.total else "")
            print(f"[{self.done}/{self.total} {self.desc}] {label} done ({elapsed:.0f} s{left})", file=self.stream,
                  flush=True)

    def interrupted(self) -> KeyboardInterrupt:
        """The exception to raise on Ctrl-C: its message is the one line the CLI prints."""
        return KeyboardInterrupt(f"interrupted: {self.done} of {self.total} {self.desc} saved; "
                                 "rerun the same command to resume")

    def close(self) -> None:
        self.bar.close()
