"""PrefixCacheCollapse: hits far below the engine's own baseline at a steady prompt mix. A weight
sync's reset (it costs the shared template once, bench/vllm_core/README.md), sleep/wake, load
shifts and a new prompt mix give no finding."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from rljob.api.spec import Health
from rljob.health.causes import PrefixCollapseConfig, PrefixCollapseDetector
from rljob.health.samples import EngineSample
from rljob.vocabulary.enums import FailureReason

CONFIG = PrefixCollapseConfig(interval=30.0)
POD = "rollout-0"
END = 1800.0
TEMPLATE = 64.0  # the chat template every prompt shares: what a reset costs once a batch


@dataclass(frozen=True)
class Mix:
    hit_rate: float = 0.877
    prompt: float = 250.0
    batch: int = 512


Phases = Callable[[float], Mix]


@dataclass(frozen=True)
class RL:
    """Sync RL: a batch admitted every `cadence` seconds, generated for `generate` seconds,
    then the engine idles (or sleeps) while the trainer steps."""

    mix: Phases = lambda t: Mix()
    cadence: float = 80.0
    generate: float = 50.0
    sleeps: bool = False
    reset_costs_template: bool = False
    counters: bool = True
    counter_reset_at: float = math.inf

    def sample(self, t: float) -> EngineSample:
        hits = queries = finished = prompt = tokens = 0.0
        batches = int(t // self.cadence) + 1
        for index in range(batches):
            start = index * self.cadence
            mix = self.mix(start)
            asked = mix.batch * mix.prompt
            queries += asked
            hits += asked * mix.hit_rate - (TEMPLATE if self.reset_costs_template else 0.0)
            done = min(1.0, (t - start) / self.generate)
            tokens += done * mix.batch * 600
            if done >= 1.0:
                finished += mix.batch
                prompt += asked
        if t >= self.counter_reset_at:
            hits, queries = hits * 0.01, queries * 0.01  # a restart of the counters
        generating = t % self.cadence < self.generate
        running = float(self.mix(t - t % self.cadence).batch) if generating else 0.0
        return EngineSample(
            t,
            generated_tokens_total=tokens,
            running=running,
            waiting=0.0,
            kv_usage=0.8 if generating else 0.0,
            prefix_hits_total=hits if self.counters else None,
            prefix_queries_total=queries if self.counters else None,
            preemptions_total=0.0,
            sleeping=self.sleeps and not generating,
            finished_requests_total=finished,
            finished_prompt_tokens_total=prompt,
        )


def after(at: float, before: Mix, then: Mix) -> Phases:
    return lambda t: then if t >= at else before


COLLAPSED = Mix(hit_rate=0.0)
CASES = [
    pytest.param(RL(), "healthy", id="steady"),
    pytest.param(RL(mix=after(900, Mix(), COLLAPSED)), "finding", id="collapse-at-a-steady-mix"),
    pytest.param(
        RL(reset_costs_template=True), "healthy", id="weight-sync-reset-costs-the-template-once"
    ),
    pytest.param(RL(sleeps=True, reset_costs_template=True), "healthy", id="sleep-wake"),
    pytest.param(
        RL(mix=after(900, Mix(), Mix(hit_rate=0.93, prompt=1000))),
        "healthy",
        id="load-shift-longer-prompts-more-samples",
    ),
    pytest.param(
        RL(mix=after(900, Mix(), Mix(hit_rate=0.22, prompt=1000))),
        "healthy",
        id="long-prompt-phase-with-fewer-hits-is-a-new-mix",
    ),
    pytest.param(
        RL(mix=after(900, Mix(), Mix(hit_rate=0.3, prompt=250, batch=64))),
        "healthy",
        id="fewer-samples-per-prompt-is-a-new-mix",  # the query rate falls 8x
    ),
    pytest.param(RL(mix=after(900, Mix(), Mix(hit_rate=0.6))), "healthy", id="a-small-drop"),
    pytest.param(
        RL(mix=after(900, Mix(hit_rate=0.1), Mix(hit_rate=0.0))),
        "healthy",
        id="too-little-reuse-to-lose",
    ),
    pytest.param(RL(cadence=720.0, generate=300.0), "healthy", id="steps-longer-than-the-window"),
    pytest.param(
        RL(cadence=720.0, generate=300.0, mix=after(1400, Mix(), COLLAPSED)),
        "finding",
        id="collapse-with-steps-longer-than-the-window",
    ),
    pytest.param(RL(counter_reset_at=1000.0), "healthy", id="counter-reset"),
    pytest.param(RL(counters=False), "insufficient_data", id="no-prefix-counters"),
]


@pytest.mark.parametrize(("workload", "outcome"), CASES)
def test_prefix_collapse(workload: RL, outcome: str) -> None:
    detector = PrefixCollapseDetector(CONFIG)
    outcomes = []
    for t in range(0, int(END) + 1, 30):
        detector.observe(POD, workload.sample(float(t)))
        outcomes.append(detector.evaluate(float(t))[0])

    findings = [e for e in outcomes if e.is_finding]
    last = outcomes[-1]
    assert last.outcome == outcome, last.message
    if outcome != "finding":
        assert findings == [], findings[0].message
        return
    assert last.reason == FailureReason.PREFIX_CACHE_COLLAPSE
    assert last.message.startswith(f"{POD} prefix-cache collapse: hit rate 0.0%")
    assert last.evidence["baseline_hit_rate"] == pytest.approx(0.877, abs=0.01)


def test_the_evidence_names_the_mix_it_was_judged_at() -> None:
    detector = PrefixCollapseDetector(CONFIG)
    workload = RL(mix=after(900, Mix(), COLLAPSED))
    for t in range(0, 1801, 30):
        detector.observe(POD, workload.sample(float(t)))
        (evaluation,) = detector.evaluate(float(t))

    evidence = evaluation.evidence
    assert evidence["hit_rate"] == 0.0
    assert evidence["prompt_tokens_per_request"] == pytest.approx(250.0)
    assert evidence["baseline_prompt_tokens_per_request"] == pytest.approx(250.0)
    assert evidence["query_rate"] == pytest.approx(evidence["baseline_query_rate"], rel=0.3)
    assert "at a steady prompt mix" in evaluation.message


def test_a_new_mix_is_learned_then_judged() -> None:
    detector = PrefixCollapseDetector(CONFIG)
    long_prompts = Mix(hit_rate=0.5, prompt=1000)
    shifts = [(0.0, Mix()), (600.0, long_prompts), (2400.0, replace(long_prompts, hit_rate=0.0))]

    def mix(t: float) -> Mix:
        return [m for start, m in shifts if t >= start][-1]

    workload = RL(mix=mix)
    verdicts = {}
    for t in range(0, 3301, 30):
        detector.observe(POD, workload.sample(float(t)))
        verdicts[t] = detector.evaluate(float(t))[0]

    assert not any(v.is_finding for t, v in verdicts.items() if t < 2400)
    assert verdicts[3300].is_finding
    assert verdicts[3300].evidence["baseline_hit_rate"] == pytest.approx(0.5, abs=0.02)


def test_a_restart_starts_over() -> None:
    detector = PrefixCollapseDetector(CONFIG)
    workload = RL(mix=after(900, Mix(), COLLAPSED))
    for t in range(0, 1801, 30):
        detector.observe(POD, workload.sample(float(t)))
        detector.evaluate(float(t))
    detector.note_restart(POD, 1800.0)
    detector.observe(POD, workload.sample(1830.0))

    assert detector.evaluate(1830.0)[0].outcome == "insufficient_data"


def test_the_window_follows_the_interval() -> None:
    slow = PrefixCollapseConfig.from_health(Health.model_validate({"interval": "2m"}))

    assert (slow.window, slow.lookback) == (480.0, 1920.0)
    assert PrefixCollapseConfig.from_health(Health()).window == 300.0
