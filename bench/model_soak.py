"""`python -m bench.model_soak --minutes N [--seed S] [--smoke]`: a randomized soak of the
action engine's model (tests/unit/model): the same state machines (Ungated and Gated, batch by
batch) and invariants the unit suite explores from its fixed seed, here from seed S, S+1, ...
(S random unless given, and printed) until the time budget is spent. It prints what it explored
(examples, steps, how often each rule ran, invariant checks) and every failure found, with its
batch's seed and hypothesis's shrunk failing sequence: `--seed` of that batch replays it.
The invariants are the suite's holding ones (its BROKEN ones have their replays already); a run
that fails is reported and the soak goes on with new seeds. Figures only: nothing is written;
exit status 1 when an invariant failed.

The suite's budget is fixed (a seed, 600 Ungated and 200 Gated examples) and small enough for
CI; this explores further for as long as it is given (bench/RESULTS.md records a 10-minute
run). `--smoke` runs 20 s (`python -m bench --smoke` runs it too, with the other pure parts).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    Rule,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from tests.unit.model.machine import ActionEngine
from tests.unit.model.test_action_engine import BROKEN, HOLDING

SMOKE_SECONDS = 20.0
STEPS_PER_EXAMPLE = 80  # as the suite's EXPLORE
EXAMPLES_PER_BATCH = 25  # one hypothesis run; the budget is checked between runs


@dataclass
class Tally:
    """What the soak explored, over every batch."""

    examples: int = 0
    steps: int = 0
    checks: int = 0  # invariant checks (each checks every holding invariant)
    rules: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    failures: list[str] = field(default_factory=list)


def counting_machine(tally: Tally, *, gated: bool = False) -> type[ActionEngine]:
    """ActionEngine (a Gated job's, with `gated`) with every rule, the initial one and the
    invariant check counted."""
    members: dict[str, Any] = {}
    for step in ActionEngine.setup_state().rules:
        members[step.function.__name__] = _counted(step, tally)

    def user_applies_the_rljob(self: ActionEngine) -> None:
        tally.examples += 1
        ActionEngine.user_applies_the_rljob(self)

    def invariants_hold(self: ActionEngine) -> None:
        tally.checks += 1
        ActionEngine.invariants_hold(self)

    members["CHECKS"] = HOLDING
    members["GATED"] = gated
    members["user_applies_the_rljob"] = initialize()(user_applies_the_rljob)
    members["invariants_hold"] = invariant()(invariants_hold)
    return type("CountedActionEngine", (ActionEngine,), members)


def _counted(step: Rule, tally: Tally) -> Callable[..., Any]:
    original = step.function

    def run(self: ActionEngine, **arguments: Any) -> Any:
        tally.steps += 1
        tally.rules[original.__name__] += 1
        return original(self, **arguments)

    run.__name__ = run.__qualname__ = original.__name__
    counted: Callable[..., Any] = rule(**step.arguments)(run)  # type: ignore[no-untyped-call]
    for condition in step.preconditions:
        counted = precondition(condition)(counted)
    return counted


def soak_settings() -> settings:
    return settings(
        max_examples=EXAMPLES_PER_BATCH,
        stateful_step_count=STEPS_PER_EXAMPLE,
        derandomize=False,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """The operator's logs (it retries injected faults loudly) and hypothesis's report of the
    falsifying sequence go into a buffer, returned for a failure's report."""
    captured = io.StringIO()
    before = structlog.get_config()
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(captured),
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
    )
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            yield captured
    finally:
        structlog.configure(**before)


def soak(seconds: float, log: Callable[[str], None], first_seed: int = 0) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch_seed = first_seed + tally.batches
        gated = tally.batches % 2 == 1
        tally.batches += 1
        machine = seed(batch_seed)(counting_machine(tally, gated=gated))
        with quiet() as captured:
            try:
                run_state_machine_as_test(machine, settings=soak_settings())
                failure = ""
            except (AssertionError, Flaky, Exception):
                failure = _falsifying(captured.getvalue()) + traceback.format_exc(limit=-3)
        kind = "Gated" if gated else "Ungated"
        if failure:
            tally.failures.append(f"seed {batch_seed} ({kind}):\n{failure}")
            log(f"batch {tally.batches} (seed {batch_seed}, {kind}): an invariant failed")
            continue
        log(
            f"batch {tally.batches} (seed {batch_seed}, {kind}): {tally.examples} examples, "
            f"{tally.steps} steps so far, {max(0.0, deadline - time.monotonic()):.0f} s left"
        )
    return tally


def _falsifying(output: str) -> str:
    """hypothesis's falsifying sequence, without the operator's log lines."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Falsifying")), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if line.startswith("state = ")), 0)
    kept = [
        line for line in lines[start:]
        if line.startswith(("Falsifying", "state", "    ")) and "invariants_hold" not in line
    ]  # fmt: skip
    return "\n".join(kept) + "\n"


def summary(tally: Tally) -> str:
    """One line, for `python -m bench --smoke`."""
    return (
        f"{tally.examples} examples, {tally.steps} steps, {tally.checks} invariant checks, "
        f"{len(tally.rules)} rules, {len(tally.failures)} failures"
    )


def report(tally: Tally, seconds: float, elapsed: float) -> str:
    rows = [
        f"budget {seconds:.0f} s, ran {elapsed:.0f} s in {tally.batches} hypothesis runs "
        f"of up to {EXAMPLES_PER_BATCH} examples (derandomize=False, {STEPS_PER_EXAMPLE} steps "
        "at most per example)",
        f"examples: {tally.examples} (including shrinking, if a failure was found)",
        f"steps: {tally.steps} ({tally.steps / max(elapsed, 1e-9):.1f}/s)",
        f"invariant checks: {tally.checks}, each of the {len(HOLDING)} holding invariants "
        f"({tally.checks * len(HOLDING)} invariant evaluations)",
        "invariants: " + ", ".join(sorted(HOLDING)),
        "not soaked (known broken, replayed by the suite): " + (", ".join(sorted(BROKEN)) or "-"),
        "rules run:",
        *(f"  {name}: {count}" for name, count in sorted(tally.rules.items())),
        f"failures: {len(tally.failures)}",
        *tally.failures,
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_soak", description=__doc__)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=10.0, help="time budget (default 10)")
    budget.add_argument("--smoke", action="store_true", help=f"{SMOKE_SECONDS:.0f} s (CI)")
    parser.add_argument("--seed", type=int, default=None, help="the first batch's seed")
    args = parser.parse_args(argv)
    seconds = SMOKE_SECONDS if args.smoke else args.minutes * 60
    first_seed = args.seed if args.seed is not None else random.randrange(2**31)

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    started = time.monotonic()
    log(f"seeds from {first_seed}")
    tally = soak(seconds, log, first_seed)
    print(report(tally, seconds, time.monotonic() - started), flush=True)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
