"""Progress of long command-line work on stderr: rich's bars on a terminal, plain lines when
stderr is a file or a pipe (or rich, the ``cli`` extra, is not installed), nothing with ``--quiet``.

Only the CLI makes these (the library never prints): ``with Progress(quiet=q).task("compile m.onnx",
total=3) as step: ...; step("compiled")``.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TextIO

__all__ = ["Progress"]


class Progress:
    """Where and how a command reports progress (see the module docstring)."""

    __slots__ = ("stream", "quiet", "rich")

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False, rich: bool | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        if rich is None:  # bars only where someone watches them redraw
            rich = _isatty(self.stream) and _has_rich()
        self.rich = rich

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Callable[[str], None]]:
        """Report a task of ``total`` steps (None: unknown); yields ``step(note)``, called once a
        step is done. The last line says how long the task took, or that it failed."""
        if self.quiet:
            yield lambda note: None
            return
        if self.rich:
            with self._rich_task(description, total) as advance:
                yield advance
            return
        start, done = time.perf_counter(), 0
        self._line(f"{description} ...")

        def step(note: str) -> None:
            nonlocal done
            done += 1
            self._line(f"{description}: {done}/{total if total is not None else '?'} {note}".rstrip())

        try:
            yield step
        except BaseException:
            self._line(f"{description}: failed after {time.perf_counter() - start:.1f} s")
            raise
        self._line(f"{description}: done in {time.perf_counter() - start:.1f} s")

    @contextmanager
    def _rich_task(self, description: str, total: int | None) -> Iterator[Callable[[str], None]]:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bars

        columns: list[Any] = [
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
        ]
        with Bars(*columns, console=Console(file=self.stream), transient=False) as bars:
            task = bars.add_task(description, total=total, note="")
            yield lambda note: bars.update(task, advance=1, note=note)

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True
