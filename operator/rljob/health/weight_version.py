"""Where a rollout engine reports its own weight version over HTTP, and the policy generation an
answer says (generationFrom engine). Pure: rljob.adapters.weight_versions does the GETs.

- SGLang (sgl-project/sglang main @44cedc2b, python/sglang/srt/entrypoints/http_server.py):
  GET /model_info answers JSON with "weight_version", a string, "default" until an update sets it
  (POST /update_weights_from_disk with "weight_version" sets it only when the load succeeded).
  Older SGLang serves GET /get_weight_version ({"weight_version": ...}); upstream now answers it
  404 ("deprecated, use /model_info"), slime's patched SGLang still serves it.
- vLLM 0.33.0 (vllm/entrypoints/rl/online/api_router.py): GET /weight_info answers
  {"weight_version": ...} ("default" at start), registered only with VLLM_SERVER_DEV_MODE=1.
"""

from __future__ import annotations

from rljob.health.monitor_engines import MAX_GENERATION
from rljob.vocabulary.enums import Engine

# The paths tried in order, the first answer with a generation wins.
WEIGHT_VERSION_PATHS: dict[Engine, tuple[str, ...]] = {
    Engine.SGLANG: ("/model_info", "/get_weight_version"),
    Engine.VLLM: ("/weight_info",),
}
WEIGHT_VERSION_KEY = "weight_version"


def weight_version_paths(engine: Engine) -> tuple[str, ...]:
    """The engine's weight-version paths; none for an engine the operator cannot read."""
    return WEIGHT_VERSION_PATHS.get(engine, ())


def parse_weight_version(body: object) -> int | None:
    """The generation an answer's "weight_version" says: a whole number, or a string of one
    (digits only); None for "default", a missing key, a negative, fractional or boolean value,
    anything else, and a number no float gauge could hold (the readings' limit)."""
    if not isinstance(body, dict):
        return None
    value = body.get(WEIGHT_VERSION_KEY)
    if isinstance(value, bool):  # bool is an int to Python, never a version
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_GENERATION:
        return value
    return None
