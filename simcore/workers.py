"""Worker processes that die with the process that started them.

A process pool's workers outlive a parent killed by ``SIGKILL`` (or the OOM killer): the
parent runs no clean-up, and a worker busy with a simulation does not read its closed
queue for minutes.  :func:`die_with_parent` is a pool ``initializer`` that ends the worker
when its parent is gone: on Linux the kernel sends it ``SIGKILL`` when the parent dies
(``prctl(PR_SET_PDEATHSIG)``, ``prctl(2)``), and everywhere a daemon thread checks twice a
second that the worker's parent is still the one that started it (an orphan is
re-parented to init or a subreaper).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_S = 0.5


def die_with_parent(parent_pid: int) -> None:
    """In a worker started by ``parent_pid`` (pass ``os.getpid()`` from the parent as the
    initializer's argument): exit as soon as that parent is gone."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # (no prctl in this libc: the thread below still notices)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="distsim-parent-watch", daemon=True).start()
