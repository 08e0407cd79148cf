"""Copying a serving SGLang engine's weights into a joining one over their HTTP APIs
(slotServices, reconcile/slots.py): the source's `GET /model_info` names the checkpoint it
loaded (`model_path`) and the version it serves (`weight_version`), and the target's
`POST /update_weights_from_disk` loads that checkpoint, the call slime's disk transport makes
(sglang python/sglang/srt/entrypoints/http_server.py @44cedc2b: 200 with success true once
loaded, 400 with success false). Bounded (a deadline, capped bodies) and never raising."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from rljob.adapters.metrics.base import HttpSource, read_bounded

MODEL_INFO = "/model_info"
UPDATE_FROM_DISK = "/update_weights_from_disk"
READ_TIMEOUT = 5.0  # the source answers /model_info from memory
LOAD_TIMEOUT = 900.0  # the target answers once the checkpoint is loaded: a large model's load
MAX_BODY_BYTES = 256 * 1024


@dataclass(frozen=True)
class CopyOutcome:
    """`ok`: the target answered success; `version`: the weight version copied."""

    ok: bool
    model_path: str = ""
    version: str = ""
    message: str = ""


class WeightCopier(HttpSource):
    """The copier; its aiohttp session is created on first use and closed by `close`."""

    def __init__(self, *, load_timeout: float = LOAD_TIMEOUT) -> None:
        self.load_timeout = load_timeout
        self._concurrency = 8
        self._adopt(None)

    async def copy(self, source_url: str, target_url: str) -> CopyOutcome:
        """`source_url`/`target_url`: http://ip:port of the two engines."""
        try:
            info = await self._json("GET", source_url + MODEL_INFO, None, READ_TIMEOUT)
            model_path, version = _checkpoint(info)
            if not model_path or not version:
                return CopyOutcome(False, message=f"{source_url}{MODEL_INFO} names no checkpoint")
            body = {"model_path": model_path, "weight_version": version}
            answer = await self._json(
                "POST", target_url + UPDATE_FROM_DISK, body, self.load_timeout
            )
        except Exception as error:  # an engine that cannot be reached is a failed copy, retried
            return CopyOutcome(False, message=f"{type(error).__name__}: {error}"[:500])
        ok = isinstance(answer, dict) and answer.get("success") is True
        message = str(answer.get("message", "")) if isinstance(answer, dict) else ""
        return CopyOutcome(ok, model_path, version, message[:500])

    async def _json(self, method: str, url: str, body: object, seconds: float) -> Any:
        """The JSON answer (400's included: SGLang says why there), else an error."""
        async with self._client().request(
            method,
            url,
            json=body,
            timeout=aiohttp.ClientTimeout(total=seconds),
            allow_redirects=False,
        ) as response:
            raw = await read_bounded(response, MAX_BODY_BYTES)
            if response.status not in (200, 400):
                raise RuntimeError(f"{method} {url}: HTTP {response.status}")
            return json.loads(raw)


def _checkpoint(info: Any) -> tuple[str, str]:
    """(model_path, weight_version) of a /model_info answer; "" where absent."""
    if not isinstance(info, dict):
        return "", ""
    path, version = info.get("model_path"), info.get("weight_version")
    return (path if isinstance(path, str) else ""), (
        str(version) if isinstance(version, str | int) and not isinstance(version, bool) else ""
    )
