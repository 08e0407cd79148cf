"""Reading a rollout engine's own weight version over its HTTP API (generationFrom engine): a GET
of each of the engine's paths in order (rljob.health.weight_version) until one answers a
generation. Bounded (a short timeout per GET, a cap on the body) and never raising: an engine
that cannot be read, or says "default", has no generation this round."""

from __future__ import annotations

import json
from collections.abc import Sequence

import aiohttp
import structlog

from rljob.adapters.metrics.base import HttpSource, read_bounded
from rljob.health.weight_version import parse_weight_version

log = structlog.get_logger("rljob.weight_versions")

DEFAULT_TIMEOUT = 2.0  # seconds per GET: the engine answers these from memory
DEFAULT_CONCURRENCY = 16
MAX_BODY_BYTES = 256 * 1024  # SGLang's /model_info is a small object


class WeightVersions(HttpSource):
    """The weight-version reader; its aiohttp session is borrowed when given, else created on
    first use (a job that never opts in costs nothing) and closed by `close`."""

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_body: int = MAX_BODY_BYTES,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.timeout = timeout
        self.max_body = max_body
        self._concurrency = max(1, concurrency)
        self._adopt(session)

    async def read(self, base_url: str, paths: Sequence[str]) -> int | None:
        """The generation the first of `paths` under `base_url` (http://ip:port) answers with
        one; None when none does."""
        for path in paths:
            generation = await self._read_one(base_url + path)
            if generation is not None:
                return generation
        return None

    async def _read_one(self, url: str) -> int | None:
        try:
            return parse_weight_version(await self._get_json(url))
        except Exception as error:  # any failure of one engine is no reading, never the round's
            log.debug("weight version unread", url=url, error=f"{type(error).__name__}: {error}")
            return None

    async def _get_json(self, url: str) -> object:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        headers = {"Accept": "application/json"}
        async with self._client().get(
            url, headers=headers, timeout=timeout, allow_redirects=False
        ) as response:
            body = await read_bounded(response, self.max_body)
            if response.status != 200:
                return None  # a 404: this engine's version serves another path
            return json.loads(body)
