"""Rollout engines inside a simulated trainer pod (the Ray actors of verl, OpenRLHF, NeMo-RL or
slime): `colocated_engines` engine models advanced with the pod's faults, served on the pod's
engine metrics port. On the ray launcher's metrics export port the page is what Ray's metrics
agent shows of vLLM's RayPrometheusStatLogger (vllm/v1/metrics/ray_wrappers.py @02579a5:
names reduced to [a-zA-Z0-9_], Ray 2.60.0 adds `ray_`, each actor's series carry its
WorkerId); on a port of their own it is vLLM's own page, the engines told apart by `engine`.
Under exporter plugin each engine is a process of its own serving its own page on the next port
(rljob.sdk.engine_page): `engine="0"` on every page, told apart by `rljob_engine_page`, with the
SDK's process-tree memory gauge beside vLLM's series (no other page carries it)."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from typing import Any

from rljob.dev.sim.exposition import CONTENT_TYPE
from rljob.dev.sim.faults import Active
from rljob.dev.sim.httpserver import Listener, Request, Response, listen
from rljob.dev.sim.models import EngineModel
from rljob.dev.sim.models.engine import Mode
from rljob.dev.sim.pods import PodInfo, is_loopback
from rljob.dev.sim.profiles import AnyProfile, EngineProfile

log = logging.getLogger("rljob.dev.sim")

_SAMPLE = re.compile(r"^(?P<name>[^\s{]+)(?:\{(?P<labels>.*)\})?(?P<rest>\s.*)$")
_COMMENT = re.compile(r"^# (?P<kind>HELP|TYPE) (?P<name>\S+)(?P<rest>.*)$")


def ray_metric_name(name: str) -> str:
    return "ray_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def through_ray(page: str, worker: str, *, gauges: bool = True) -> str:
    """One engine's vLLM page as Ray's metrics agent exports it: only vLLM's metrics, renamed,
    with the actor's WorkerId. Without `gauges`: Ray 2.60.0 drops a gauge two report intervals
    after it was last set, and vLLM sets them only when a step returns outputs, so an engine
    that stopped stepping shows its counters only (tests/upstream/test_ray_engine_metrics.py)."""
    gauge_names = {
        match["name"]
        for line in page.splitlines()
        if (match := _COMMENT.match(line)) and match["kind"] == "TYPE" and "gauge" in match["rest"]
    }
    lines = []
    for line in page.splitlines():
        comment = _COMMENT.match(line)
        if comment is not None:
            if comment["name"].startswith("vllm:"):
                name = ray_metric_name(comment["name"])
                lines.append(f"# {comment['kind']} {name}{comment['rest']}")
            continue
        sample = _SAMPLE.match(line)
        if sample is None or not sample["name"].startswith("vllm:"):
            continue
        if not gauges and sample["name"] in gauge_names:
            continue
        labels = ",".join(filter(None, (sample["labels"], f'WorkerId="{worker}"')))
        lines.append(f"{ray_metric_name(sample['name'])}{{{labels}}}{sample['rest']}")
    return "\n".join(lines) + "\n"


# Modes in which an engine runs no step that returns outputs (vLLM then sets no gauge).
NOT_STEPPING = frozenset({Mode.STALLED, Mode.IDLE, Mode.ASLEEP, Mode.PAUSED})


def _engine_sample(line: str) -> bool:
    return line.startswith(("vllm:", "ray_vllm_"))


# rljob.sdk.engine_page's PAGE_LABEL.
PAGE_LABEL = "rljob_engine_page"


def on_page(page: str, index: int) -> str:
    """One engine process's page as the SDK plugin serves it: every sample labelled with the
    page's index."""
    lines = []
    for line in page.splitlines():
        sample = _SAMPLE.match(line)
        if sample is None or line.startswith("#"):
            lines.append(line)
            continue
        labels = ",".join(filter(None, (sample["labels"], f'{PAGE_LABEL}="{index}"')))
        lines.append(f"{sample['name']}{{{labels}}}{sample['rest']}")
    return "\n".join(lines) + "\n"


class GangEngines:
    """The engines of one trainer pod and the listener serving their page."""

    def __init__(self, pod: PodInfo, profile: EngineProfile, count: int, now: float) -> None:
        self.pod = pod
        self.through_ray = pod.engines_through_ray
        self.pages = min(pod.engine_pages, count)  # exporter plugin: one page per engine
        self.profile, self.count = profile, count
        self.models: list[EngineModel] = []
        self.restart(pod, now)
        self.listeners: list[Listener] = []

    def restart(self, pod: PodInfo, now: float) -> None:
        """New engines: the pod's container restarted (a new instance)."""
        self.pod = pod
        # Each actor is an engine of its own (engine "0") under Ray and the plugin; one vLLM
        # server's data-parallel engines on a port of their own.
        own_process = self.through_ray or self.pages > 0
        self.models = [
            EngineModel(
                dataclasses.replace(self.profile, engine="0" if own_process else str(index)),
                f"{pod.instance}/{index}",
                now,
            )
            for index in range(self.count)
        ]

    async def serve(self, scraped: Callable[[], bool]) -> None:
        """Listens on the pod's IP and engine metrics port (the caller checked both);
        `scraped()` brings the engines up to date, False when the pod must not answer."""
        port = self.pod.engines_port or 0
        pages: list[int | None] = list(range(self.pages)) if self.pages else [None]
        for page in pages:
            offset = page or 0
            handler = self._handler(scraped, page)
            self.listeners.append(await listen(handler, port + offset, host=self.pod.ip))

    def advance(self, now: float, faults: Active) -> None:
        for model in self.models:
            model.advance(now, faults)

    def render(self, page: int | None = None) -> str:
        """One page: the first engine's with its HELP and TYPE lines, the others' samples; or
        engine `page`'s own page (exporter plugin)."""
        if page is not None:
            return on_page(self.models[page].render(plugin=True), page)
        pages = [
            through_ray(
                model.render(), f"{self.pod.uid}-{index}", gauges=model.mode not in NOT_STEPPING
            )
            if self.through_ray
            else model.render()
            for index, model in enumerate(self.models)
        ]
        rest = [line for page in pages[1:] for line in page.splitlines() if _engine_sample(line)]
        return pages[0] + "".join(f"{line}\n" for line in rest) if pages else ""

    def state(self) -> list[dict[str, Any]]:
        return [model.state() for model in self.models]

    async def close(self) -> None:
        listeners, self.listeners = self.listeners, []
        for listener in listeners:
            await listener.close()

    def _handler(self, scraped: Callable[[], bool], page: int | None) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            if not scraped():
                return Response.text("gone or unreachable\n", 503)
            if request.path != "/metrics":
                return Response.text("not found; try /metrics\n", 404)
            return Response.text(self.render(page), content_type=CONTENT_TYPE)

        return handle


async def attach_gang(
    pod: PodInfo,
    profile: AnyProfile,
    engine: EngineProfile,
    now: float,
    scraped: Callable[[], bool],
) -> GangEngines | None:
    """The engines inside a trainer pod whose profile has some (`colocated_engines`) and that
    declares their port; served, like the pod's own page, only on a loopback pod IP."""
    count = getattr(profile, "colocated_engines", 0)
    if not count or not pod.engines_port or not is_loopback(pod.ip):
        return None
    gang = GangEngines(pod, engine, count, now)
    try:
        await gang.serve(scraped)
    except OSError as exc:
        log.warning(
            "cannot serve %s's engines on %s:%d: %s", pod.key, pod.ip, pod.engines_port, exc
        )
        return None
    return gang
