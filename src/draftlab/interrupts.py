"""Ctrl-C (SIGINT) and SIGTERM end a command in one line: exit code 130 (143 for SIGTERM), no traceback, nothing
half-written (every file is written to a temp name and renamed, `draftlab.io`, whose `finally` removes the temp
file the interrupt cut short), and what was finished kept (a stage resumes from its last checkpoint or recorded
batch groups as after kill -9; `draftlab decode` prints the text decoded so far).

`install()` makes both signals raise `KeyboardInterrupt` (SIGTERM as its subclass `Terminated`) in the main thread
and remembers which one came, because Lightning's `Trainer.fit` turns a KeyboardInterrupt into
`sys.exit(1)` after its own shutdown: `code(exc)` reads the remembered signal, so a stage still exits 130 / 143.
Lightning's "Detected KeyboardInterrupt, attempting graceful shutdown ..." line is dropped: the command prints
its own."""
from __future__ import annotations

import logging
import signal
import threading

SIGNAL_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as a shell reports it
_received: list[int] = []  # the signals that came, in order (the process's own state: one command per process)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Python is (as Ctrl-C is): the same clean-up, exit code 143."""


def _raise(signum, frame) -> None:
    _received.append(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


class _DropLightningInterrupt(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Detected KeyboardInterrupt" not in record.getMessage()


def install() -> None:
    """SIGINT and SIGTERM raise in the main thread (elsewhere signals cannot be set: nothing to do)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in SIGNAL_CODES:
        signal.signal(s, _raise)
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropLightningInterrupt) for f in log.filters):  # once, however often a process installs
        log.addFilter(_DropLightningInterrupt())


def received() -> int | None:
    """The first signal that interrupted this process, or None."""
    return _received[0] if _received else None


def code(exc: BaseException | None = None) -> int:
    """The exit code of an interrupted command: 143 after SIGTERM, else 130 (Ctrl-C)."""
    if isinstance(exc, Terminated) or received() == signal.SIGTERM:
        return SIGNAL_CODES[signal.SIGTERM]
    return SIGNAL_CODES[signal.SIGINT]


def name(exc: BaseException | None = None) -> str:
    """'SIGTERM' or 'Ctrl-C', for the one line."""
    return "SIGTERM" if code(exc) == SIGNAL_CODES[signal.SIGTERM] else "Ctrl-C"
