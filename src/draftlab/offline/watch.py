"""What watches a stage of the offline runner (`draftlab.offline.runner`): the console its lines go to (`Console`), the
deadline's watchdog that cuts it (`Watchdog`, raising `StageCut` in the main thread) and its peak memory
(`peak_reset`, `peak_read`)."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path


class StageCut(BaseException):
    """Raised inside a running stage by the deadline's watchdog. A BaseException, so that the stages' `except
    Exception` handlers let it through; Lightning calls its callbacks' on_exception (the checkpoint) and re-raises."""


class Console:
    """The run's console as a file: fds 1 and 2 and sys.stdout / sys.stderr go to `path` (what C extensions print
    included); `say` writes a short line to the real console (and to the file). `close` restores all."""

    def __init__(self, path: Path):
        sys.stdout.flush()
        sys.stderr.flush()
        self.path = path
        self.file = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
        self.saved = (os.dup(1), os.dup(2))
        self.real = os.fdopen(os.dup(self.saved[1]), "w", buffering=1, encoding="utf-8", errors="replace")
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        self.streams = (sys.stdout, sys.stderr)
        sys.stdout = sys.stderr = self.file

    def say(self, line: str) -> None:
        self.file.write(line + "\n")
        self.file.flush()
        try:
            self.real.write(line + "\n")
            self.real.flush()
        except OSError:
            pass

    def offset(self) -> int:
        self.file.flush()
        return self.path.stat().st_size

    def since(self, offset: int, limit: int = 4000) -> str:
        """The console's text from byte `offset` on (its last `limit` characters)."""
        self.file.flush()
        with open(self.path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")[-limit:]

    def close(self) -> None:
        self.file.flush()
        sys.stdout, sys.stderr = self.streams
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        self.file.close()
        self.real.close()


class Watchdog:
    """Cuts the running stage (raises StageCut in the main thread) when `at` (time.time()) is reached: SIGALRM;
    nothing where no alarm can be set (not the main thread, or no deadline)."""

    def __init__(self, at: float | None):
        self.at, self.armed = at, False
        self.usable = at is not None and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()

    def _fire(self, signum, frame):
        if self.armed:
            self.armed = False
            raise StageCut()

    def __enter__(self):
        if self.usable:
            self.old = signal.signal(signal.SIGALRM, self._fire)
            self.armed = True
            signal.setitimer(signal.ITIMER_REAL, max(self.at - time.time(), 0.01))
        return self

    def __exit__(self, *exc):
        if self.usable:
            self.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
        return False


def peak_reset() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak resident set
    except OSError:
        pass


def peak_read() -> dict:
    import torch

    if torch.cuda.is_available():
        return {"peak_gib": torch.cuda.max_memory_allocated() / 2**30, "peak_kind": "cuda max_memory_allocated"}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return {"peak_gib": int(line.split()[1]) / 2**20, "peak_kind": "process peak RSS (VmHWM)"}
    except OSError:
        pass
    import resource

    return {"peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "peak_kind": "process max RSS"}
