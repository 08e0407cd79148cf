"""The bed's operator entry, `python -m rljob.dev.crash_entry run ...`: `rljob run` with the test
crash point named by RLJOB_TEST_CRASH_POINT armed. Only the bed starts the operator this way, so a
production pod's environment cannot arm one (pyproject's import contract keeps the operator from
importing this module)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence

from rljob import cli
from rljob.crashpoints import CRASH_POINTS, CrashHook, install_crash_hook

CRASH_POINT_ENV = "RLJOB_TEST_CRASH_POINT"


def sigkill_at(armed: str) -> CrashHook:
    """A hook that SIGKILLs this process each time the armed point is reached (no cleanup, as a
    node loss would)."""

    def hook(name: str) -> None:
        if name == armed:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def arm(environ: Mapping[str, str]) -> str | None:
    """Installs the hook for the point the environment names, if any; an unknown name is refused
    so that a typo cannot pass a test by never crashing."""
    armed = environ.get(CRASH_POINT_ENV)
    if not armed:
        return None
    if armed not in CRASH_POINTS:
        raise SystemExit(f"{CRASH_POINT_ENV}={armed!r} is not one of {', '.join(CRASH_POINTS)}")
    install_crash_hook(sigkill_at(armed))
    return armed


def main(argv: Sequence[str] | None = None) -> int:
    arm(os.environ)
    return cli.main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
