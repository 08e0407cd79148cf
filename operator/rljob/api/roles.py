"""The roles of an RLJob: the settings every role shares (they shape its pod template) and
what each kind of role adds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import Field

from rljob.api.base import SpecModel
from rljob.api.declared_ports import SDK_METRICS_PORTS
from rljob.api.durations import Duration
from rljob.api.enum_fields import (
    EngineExporterField,
    EngineField,
    GenerationFromField,
    LauncherField,
    WeightSyncField,
)
from rljob.api.kube_names import ImageRef, NodeSelector
from rljob.api.kube_types import (
    EnvList,
    ObjectName,
    PodTemplate,
    PullSecretList,
    ResourceRequirements,
    TolerationList,
    VolumeList,
    VolumeMountList,
)
from rljob.api.pod_template import pod_template_rules
from rljob.api.ray_ports import (
    RAY_FIXED_PORTS,
    RAY_LAUNCHER_LEAVES_ENGINES_PORT,
    RAY_LAUNCHER_LEAVES_METRICS_PORT,
    RAY_METRICS_EXPORT_PORT,
    RAY_WORKER_PORTS,
)
from rljob.api.rules import CrossFieldRule, Immutable
from rljob.vocabulary.defaults import DEFAULT_TRAINER_NODES
from rljob.vocabulary.enums import (
    Engine,
    EngineExporter,
    GenerationFrom,
    Launcher,
    RoleName,
    WeightSync,
)

PROMETHEUS_NAME_PATTERN = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
RESOURCE_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

MAX_REPLICAS = 1024
MAX_TRAINER_NODES = 1024
MAX_GPUS_PER_POD = 64

CommandArg = Annotated[str, Field(max_length=16384)]
MetricName = Annotated[str, Field(pattern=PROMETHEUS_NAME_PATTERN, max_length=200)]


class MetricsEndpoint(SpecModel):
    """Where the role's pods serve Prometheus metrics."""

    port: int = Field(ge=1, le=65535, description="Container port serving metrics.")
    path: Annotated[str, Field(pattern=r"^/", max_length=256)] = Field(
        default="/metrics", description="HTTP path of the metrics page."
    )


class Role(SpecModel):
    """Settings every role shares; they shape the role's pod template."""

    image: ImageRef | None = Field(
        default=None, description="Container image; defaults to spec.image."
    )
    command: Annotated[list[CommandArg], Field(max_length=64)] | None = Field(
        default=None, description="Entrypoint of the main container (replaces the image's)."
    )
    args: Annotated[list[CommandArg], Field(max_length=256)] | None = Field(
        default=None, description="Arguments of the main container."
    )
    env: EnvList = Field(
        default_factory=list, description="Environment variables of the main container."
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="CPU, memory and other resources of the main container."
    )
    gpus: int = Field(
        default=0,
        ge=0,
        le=MAX_GPUS_PER_POD,
        description="GPUs per pod, requested and limited as gpuResourceName.",
    )
    gpu_resource_name: Annotated[str, Field(pattern=RESOURCE_NAME_PATTERN, max_length=253)] = Field(
        default="nvidia.com/gpu", description="Extended resource name of a GPU."
    )
    node_selector: NodeSelector = Field(
        default_factory=dict, description="Node labels the role's pods require."
    )
    tolerations: TolerationList = Field(
        default_factory=list, description="Taints the role's pods tolerate."
    )
    priority_class_name: ObjectName | None = Field(
        default=None, description="PriorityClass of the role's pods."
    )
    scheduler_name: ObjectName | None = Field(
        default=None, description="Scheduler for the role's pods (e.g. a gang scheduler)."
    )
    service_account_name: ObjectName | None = Field(
        default=None, description="ServiceAccount the role's pods run as."
    )
    image_pull_secrets: PullSecretList = Field(
        default_factory=list, description="Secrets for pulling the role's images."
    )
    volumes: VolumeList = Field(
        default_factory=list, description="Extra pod volumes, as in a pod spec."
    )
    volume_mounts: VolumeMountList = Field(
        default_factory=list, description="Extra mounts of the main container."
    )
    termination_grace_period_seconds: int | None = Field(
        default=None,
        ge=0,
        le=86400,
        description="Seconds a stopping pod gets after SIGTERM; the trainer uses it to "
        "checkpoint and it must not exceed failurePolicy.teardownTimeout. Default: the "
        "operator's per-role default (trainer: torchrun's SIGTERM-to-SIGKILL window, "
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30, plus 15; at most teardownTimeout).",
    )
    metrics: MetricsEndpoint | None = Field(
        default=None, description="Metrics endpoint; default: the engine's or SDK's port."
    )
    pod_template: PodTemplate | None = Field(
        default=None,
        description="Free-form pod template merged over the rendered one, for what the fields "
        "above do not cover, as a strategic merge patch: objects merge key by key and null "
        "removes a key; containers, initContainers, volumes and imagePullSecrets merge by name, "
        "and in a container env by name, volumeMounts by mountPath and ports by containerPort "
        "(an item with a new key is appended); other lists replace. It may not set "
        "spec.restartPolicy, rljob.io/ labels, annotations and readiness gates, the "
        "app.kubernetes.io/managed-by label, nor in the main container (named like the role) "
        "the env the operator sets or its ports; its metadata and containers must have a pod "
        "template's shape.",
    )


MAX_UNAVAILABLE_WITHIN_REPLICAS = CrossFieldRule(
    cel="self.maxUnavailable <= self.replicas",
    message="maxUnavailable must not exceed replicas",
    field="maxUnavailable",
    holds=lambda role: role.max_unavailable <= role.replicas,
)


class ServingRole(Role):
    """A role run as a Deployment of identical replicas (rollout, reference, verifier)."""

    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, description="Number of pods.")
    max_unavailable: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        description="Pods that may be down at once during restarts and rollouts.",
    )

    cel_rules: ClassVar[tuple[CrossFieldRule, ...]] = (MAX_UNAVAILABLE_WITHIN_REPLICAS,)


class EngineMetricNames(SpecModel):
    """Prometheus metric names of a rollout engine, overriding the engine's defaults."""

    generation_tokens_total: MetricName | None = Field(
        default=None, description="Counter of generated tokens."
    )
    requests_running: MetricName | None = Field(
        default=None, description="Gauge of requests being processed."
    )
    requests_waiting: MetricName | None = Field(
        default=None, description="Gauge of queued requests."
    )
    kv_cache_usage: MetricName | None = Field(
        default=None, description="Gauge of KV-cache usage, 0 to 1."
    )
    prefix_cache_hits_total: MetricName | None = Field(
        default=None, description="Counter of prefix-cache hits."
    )
    prefix_cache_queries_total: MetricName | None = Field(
        default=None, description="Counter of prefix-cache queries."
    )
    preemptions_total: MetricName | None = Field(
        default=None, description="Counter of request preemptions."
    )
    sleep_state: MetricName | None = Field(
        default=None, description="Gauge that is non-zero while the engine sleeps."
    )
    policy_generation: MetricName | None = Field(
        default=None,
        description="Gauge of the policy generation the engine serves, read by weightSync "
        "Gated (default rljob_engine_policy_generation); e.g. an engine's own weight version.",
    )


def _custom_engine_has_metric_names(role: Any) -> bool:
    if role.engine != Engine.CUSTOM:
        return True
    names = role.metric_names
    return names is not None and None not in (
        names.generation_tokens_total,
        names.requests_running,
        names.requests_waiting,
    )


CUSTOM_ENGINE_NEEDS_METRIC_NAMES = CrossFieldRule(
    cel="self.engine != 'custom' || (has(self.metricNames)"
    " && has(self.metricNames.generationTokensTotal)"
    " && has(self.metricNames.requestsRunning)"
    " && has(self.metricNames.requestsWaiting))",
    message="engine custom needs metricNames.generationTokensTotal, requestsRunning and "
    "requestsWaiting",
    field="metricNames",
    holds=_custom_engine_has_metric_names,
)


# The operator knows how vLLM and SGLang report their weight version over HTTP, not a custom
# engine's (rljob.health.weight_version).
ENGINE_GENERATION_NEEDS_KNOWN_ENGINE = CrossFieldRule(
    cel="self.generationFrom != 'engine' || self.engine != 'custom'",
    message="generationFrom engine reads a vLLM or SGLang weight version: engine custom reports "
    "its generation on its metrics page (generationFrom metrics)",
    field="generationFrom",
    holds=lambda role: (
        role.generation_from != GenerationFrom.ENGINE or role.engine != Engine.CUSTOM
    ),
)


# Slot Services hand a slot over only to an engine behind the gate, brought to the slot's weights
# by SGLang's POST /update_weights_from_disk (docs/weight-sync.md#engine-slots).
def _slots_need(cel: str, needs: str, holds: Callable[[Any], bool]) -> CrossFieldRule:
    return CrossFieldRule(
        cel=f"!self.slotServices || {cel}",
        message=f"slotServices {needs}",
        field="slotServices",
        holds=lambda role: not role.slot_services or holds(role),
    )


SLOTS_NEED_GATED = _slots_need(
    "self.weightSync == 'Gated'",
    "hands a slot only to an engine behind the gate: it needs weightSync Gated",
    lambda role: role.weight_sync == WeightSync.GATED,
)
SLOTS_NEED_ENGINE_GENERATION = _slots_need(
    "self.generationFrom == 'engine'",
    "follows the weight version the engines report: it needs generationFrom engine",
    lambda role: role.generation_from == GenerationFrom.ENGINE,
)
SLOTS_NEED_SGLANG = _slots_need(
    "self.engine == 'sglang'",
    "copies a slot's weights with SGLang's POST /update_weights_from_disk: it needs engine sglang",
    lambda role: role.engine == Engine.SGLANG,
)


class RolloutRole(ServingRole):
    """Inference engines generating samples."""

    engine: Annotated[
        EngineField,
        Immutable("engine is immutable: create a new RLJob to switch engines"),
    ] = Field(default=Engine.VLLM, description="Inference engine: vllm, sglang or custom.")
    metric_names: EngineMetricNames | None = Field(
        default=None,
        description="Metric names overriding the engine's; required for engine custom.",
    )
    weight_sync: WeightSyncField = Field(
        default=WeightSync.UNGATED,
        description="Ungated: an engine the operator replaces is deleted at once and its "
        "replacement serves when its probes pass. Gated: it is drained first (the roster says "
        "draining; deleted once its running requests reach zero, no container of it runs, or "
        "drainTimeout passes) and "
        "its replacement turns Ready only behind the rljob.io/policy-current readiness gate, "
        "once it reports the job's current policy generation (see generationFrom). "
        "Switching modes rolls the engines once.",
    )
    drain_timeout: Duration = Field(
        default="2m",
        description="Gated: how long a draining engine may finish its running requests before "
        "it is deleted anyway.",
    )
    generation_from: GenerationFromField = Field(
        default=GenerationFrom.METRICS,
        description="Where the operator reads the policy generation an engine serves (the "
        "roster's generation; with Gated, the gate's). "
        "metrics: the rljob_engine_policy_generation gauge on its metrics page. engine: the "
        'engine\'s own weight version (a whole number; "default" counts as none), read over '
        "HTTP on the port its Services forward (metrics.port, else vLLM 8000, SGLang 30000): "
        "SGLang's GET /model_info, "
        "else /get_weight_version; vLLM's GET /weight_info, which vLLM serves only with "
        "VLLM_SERVER_DEV_MODE=1 in the engine's env (set it yourself). A joining engine must "
        "then reach what the serving engines report now, so a driver whose counter starts over "
        "in a new process (slime) is followed. Not for engine custom.",
    )

    slot_services: bool = Field(
        default=False,
        description="One ClusterIP Service per engine slot, <name>-rollout-<k> for k < replicas, "
        "for a driver that reads its engine addresses once (slime's "
        "--rollout-external-engine-addrs; the trainer gets them in "
        "RLJOB_ROLLOUT_SLOT_ADDRESSES). A slot's address outlives its engine: before an engine "
        "drains, its slots are lent to a serving engine, and a replacement takes a slot only "
        "once the operator copied the slot's weights into it and its gate opened. Needs "
        "engine sglang, weightSync Gated and generationFrom engine.",
    )

    cel_rules = (
        MAX_UNAVAILABLE_WITHIN_REPLICAS,
        CUSTOM_ENGINE_NEEDS_METRIC_NAMES,
        ENGINE_GENERATION_NEEDS_KNOWN_ENGINE,
        SLOTS_NEED_GATED,
        SLOTS_NEED_ENGINE_GENERATION,
        SLOTS_NEED_SGLANG,
    )


ENGINE_EXPORTER_NEEDS_PORT = CrossFieldRule(
    cel="self.exporter != 'engine' || has(self.port)",
    message="exporter engine needs port: the port the engines serve /metrics on in each pod",
    field="port",
    holds=lambda engines: engines.exporter != EngineExporter.ENGINE or engines.port is not None,
)
# python/sglang/srt/metrics/collector.py exports through prometheus_client on its HTTP server;
# only vLLM has a Ray stat logger (vllm/v1/metrics/ray_wrappers.py).
RAY_EXPORTER_NEEDS_VLLM = CrossFieldRule(
    cel="self.exporter != 'ray' || self.engine != 'sglang'",
    message="SGLang does not export through Ray's metrics agent: use exporter engine and its port",
    field="exporter",
    holds=lambda engines: (
        not (engines.exporter == EngineExporter.RAY and engines.engine == Engine.SGLANG)
    ),
)
PLUGIN_EXPORTER_NEEDS_VLLM = CrossFieldRule(
    cel="self.exporter != 'plugin' || self.engine == 'vllm'",
    message="exporter plugin is the rljob SDK's vLLM stat-logger plugin: it needs engine vllm",
    field="exporter",
    holds=lambda engines: (
        engines.exporter != EngineExporter.PLUGIN or engines.engine == Engine.VLLM
    ),
)
PAGES_NEED_PLUGIN = CrossFieldRule(
    cel="self.pages == 1 || self.exporter == 'plugin'",
    message="pages counts the plugin's pages per pod: it needs exporter plugin",
    field="pages",
    holds=lambda engines: engines.pages == 1 or engines.exporter == EngineExporter.PLUGIN,
)
# Where the SDK's vLLM plugin serves its first engine page unless port says otherwise: beside the
# SDK's own 9400, outside Ray's ports and worker range.
ENGINE_PAGE_PORT = 9410
MAX_ENGINE_PAGES = 16


class GangEngines(SpecModel):
    """Inference engines running inside the trainer gang (the Ray actors of verl, OpenRLHF,
    NeMo-RL or slime): their metrics feed the engine detectors, attributed to the pod."""

    engine: EngineField = Field(
        default=Engine.VLLM, description="Inference engine: vllm, sglang or custom."
    )
    exporter: EngineExporterField = Field(
        default=EngineExporter.RAY,
        description="Where the engines' metrics are read: ray (Ray's metrics agent on the Ray "
        "metrics export port, vLLM's RayPrometheusStatLogger; names as Ray exports them, "
        "ray_vllm_...), engine (the engines' own /metrics on port), or plugin (the rljob SDK's "
        "vLLM stat-logger plugin in the image: each engine process serves its own vLLM page on "
        "the first free port of port .. port+pages-1).",
    )
    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Container port of the engines' metrics page; default for exporter ray: "
        f"the Ray metrics export port 8080; for exporter plugin: {ENGINE_PAGE_PORT}.",
    )
    pages: int = Field(
        default=1,
        ge=1,
        le=MAX_ENGINE_PAGES,
        description="exporter plugin: the engine processes per pod, each serving a page on the "
        "next port from port (e.g. 4 for four TP-2 engines on 8 GPUs).",
    )
    path: Annotated[str, Field(pattern=r"^/", max_length=256)] = Field(
        default="/metrics", description="HTTP path of the metrics page."
    )
    metric_names: EngineMetricNames | None = Field(
        default=None,
        description="Metric names as scraped, overriding the engine's; required for engine custom.",
    )

    cel_rules: ClassVar[tuple[CrossFieldRule, ...]] = (
        ENGINE_EXPORTER_NEEDS_PORT,
        RAY_EXPORTER_NEEDS_VLLM,
        PLUGIN_EXPORTER_NEEDS_VLLM,
        PAGES_NEED_PLUGIN,
        CUSTOM_ENGINE_NEEDS_METRIC_NAMES,
    )

    @property
    def metrics_port(self) -> int:
        """The port of the first (or only) page."""
        if self.port is not None:
            return self.port
        return (
            ENGINE_PAGE_PORT if self.exporter == EngineExporter.PLUGIN else RAY_METRICS_EXPORT_PORT
        )

    @property
    def page_ports(self) -> tuple[int, ...]:
        """Every page's port: the plugin's one per engine process, else the one page."""
        count = self.pages if self.exporter == EngineExporter.PLUGIN else 1
        return tuple(range(self.metrics_port, min(self.metrics_port + count, 65536)))


RAY_LAUNCHER_NEEDS_COMMAND = CrossFieldRule(
    cel="self.launcher != 'ray' || has(self.command)",
    message="launcher ray needs command: the driver index 0 runs once the Ray head is up",
    field="command",
    holds=lambda role: role.launcher != Launcher.RAY or role.command is not None,
)


RAY_EXPORTER_NEEDS_RAY_OR_PORT = CrossFieldRule(
    cel="!has(self.engines) || self.engines.exporter != 'ray' || self.launcher == 'ray'"
    " || has(self.engines.port)",
    message="engines exporter ray reads Ray's metrics agent: use launcher ray, or set "
    "engines.port to where your own Ray nodes export metrics",
    field="engines.exporter",
    holds=lambda role: (
        role.engines is None
        or role.engines.exporter != EngineExporter.RAY
        or role.launcher == Launcher.RAY
        or role.engines.port is not None
    ),
)


TRAINER_METRICS_PORT = SDK_METRICS_PORTS[RoleName.TRAINER]
_LOWEST_WORKER_PORT = RAY_WORKER_PORTS["RLJOB_RAY_MIN_WORKER_PORT"]
_HIGHEST_WORKER_PORT = RAY_WORKER_PORTS["RLJOB_RAY_MAX_WORKER_PORT"]


def _pages_clear_cel(start: str) -> str:
    """CEL true when the plugin's pages from `start` leave the trainer's metrics port and,
    under launcher ray, Ray's fixed ports and worker range."""
    end = f"{start} + self.engines.pages"

    def on_page(x: str) -> str:
        return f"({x} >= {start} && {x} < {end})"

    trainer_page = (
        f"((has(self.metrics) && !{on_page('self.metrics.port')})"
        f" || (!has(self.metrics) && !{on_page(str(TRAINER_METRICS_PORT))}))"
    )
    ray_ports_left = " && ".join(f"!{on_page(str(port))}" for port in RAY_FIXED_PORTS)
    ray = (
        f"(self.launcher != 'ray' || ({ray_ports_left} && ({end} <= {_LOWEST_WORKER_PORT}"
        f" || {start} > {_HIGHEST_WORKER_PORT})))"
    )
    return f"({trainer_page} && {ray})"


def _plugin_pages_clear(role: Any) -> bool:
    engines = role.engines
    if engines is None or engines.exporter != EngineExporter.PLUGIN:
        return True
    pages = range(engines.metrics_port, engines.metrics_port + engines.pages)
    trainer_page = role.metrics.port if role.metrics is not None else TRAINER_METRICS_PORT
    if trainer_page in pages:
        return False
    if role.launcher != Launcher.RAY:
        return True
    workers = range(_LOWEST_WORKER_PORT, _HIGHEST_WORKER_PORT + 1)
    apart = pages.stop <= workers.start or pages.start >= workers.stop
    return apart and not any(port in pages for port in RAY_FIXED_PORTS)


# Every page port, not only the first: a page on the trainer's own port would be scraped twice,
# one on a Ray port or in its worker range would fight Ray for it.
PLUGIN_PAGES_CLEAR = CrossFieldRule(
    cel="!has(self.engines) || self.engines.exporter != 'plugin'"
    f" || (has(self.engines.port) && {_pages_clear_cel('self.engines.port')})"
    f" || (!has(self.engines.port) && {_pages_clear_cel(str(ENGINE_PAGE_PORT))})",
    message="engines.port .. engines.port + pages - 1 (the plugin's pages) must leave the "
    "trainer's metrics port and, under launcher ray, Ray's ports and worker range "
    f"{_LOWEST_WORKER_PORT}-{_HIGHEST_WORKER_PORT}",
    field="engines.pages",
    holds=_plugin_pages_clear,
)


class TrainerRole(Role):
    """The multi-node trainer: one Indexed Job per attempt, restarted as a gang."""

    nodes: int = Field(
        default=DEFAULT_TRAINER_NODES,
        ge=1,
        le=MAX_TRAINER_NODES,
        description="Trainer pods (one per node); changes only while suspended.",
    )
    scheduling_timeout: Duration = Field(
        default="15m",
        description="How long the whole gang may wait to be scheduled before Unschedulable.",
    )
    launcher: LauncherField = Field(
        default=Launcher.TORCHRUN,
        description="How the pods start: torchrun (PET_* rendezvous variables, the command as "
        "is), ray (index 0 starts the Ray head then runs command as the driver, the other "
        "indexes join the head and block; the Job succeeds when index 0 does: Kubernetes "
        "1.33+), or command (the command as is, with NNODES and NODE_RANK only).",
    )

    engines: GangEngines | None = Field(
        default=None,
        description="Rollout engines running inside the gang's pods (colocated); their "
        "findings are Report unless a rule on role trainer says otherwise.",
    )

    cel_rules: ClassVar[tuple[CrossFieldRule, ...]] = (
        RAY_LAUNCHER_NEEDS_COMMAND,
        RAY_EXPORTER_NEEDS_RAY_OR_PORT,
        RAY_LAUNCHER_LEAVES_METRICS_PORT,
        RAY_LAUNCHER_LEAVES_ENGINES_PORT,
        PLUGIN_PAGES_CLEAR,
    )


class Roles(SpecModel):
    """The job's workloads."""

    rollout: RolloutRole | None = Field(
        default=None,
        description="Inference engines generating samples, as a Deployment; leave out when "
        "the engines run inside the trainer gang (see trainer.engines).",
    )
    trainer: TrainerRole = Field(description="The multi-node trainer; runs the RL driver.")
    reference: ServingRole | None = Field(
        default=None, description="Reference-model servers (optional)."
    )
    verifier: ServingRole | None = Field(
        default=None, description="Verifiers: reward models or sandboxes, often CPU-only."
    )

    # What each role's podTemplate may not override (rljob.api.pod_template): placed here, where
    # a role's name, and so its main container's, is known.
    cel_rules = pod_template_rules()
