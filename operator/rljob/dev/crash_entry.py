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
# Only a job of this namespace reaches the armed point (a test's own): a job another test left
# in a namespace being deleted must not kill the operator the test restarts.
CRASH_NAMESPACE_ENV = "RLJOB_TEST_CRASH_NAMESPACE"


def crash_env(point: str, namespace: str) -> dict[str, str]:
    """The environment that arms `point` for the jobs of `namespace` only."""
    return {CRASH_POINT_ENV: point, CRASH_NAMESPACE_ENV: namespace}


def sigkill_at(armed: str, namespace: str = "") -> CrashHook:
    """A hook that SIGKILLs this process each time the armed point is reached (no cleanup, as a
    node loss would); with `namespace`, only by a job of that namespace (or where none is
    known)."""

    def hook(name: str, reached_in: str) -> None:
        if name == armed and (not namespace or reached_in in ("", namespace)):
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
    install_crash_hook(sigkill_at(armed, environ.get(CRASH_NAMESPACE_ENV, "")))
    return armed


def main(argv: Sequence[str] | None = None) -> int:
    arm(os.environ)
    return cli.main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
