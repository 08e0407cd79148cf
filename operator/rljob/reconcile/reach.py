"""Where the platform lets a job aim the operator: the Prometheus URLs it queries and the S3
endpoints and buckets it signs requests to with its own identity. A job naming another is refused
(Accepted=False, reason NotAllowed) before any request is made. The chart's
ValidatingAdmissionPolicy applies the same matching at admission (docs/install.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rljob.api import FieldViolation, RLJobSpec

ANY_BUCKET = "*"
ANY_PORT = ":*"
NOT_ALLOWED = "NotAllowed"
PROMETHEUS_FIELD = "spec.health.source.prometheus.url"
ENDPOINT_FIELD = "spec.checkpoint.endpoint"
BUCKET_FIELD = "spec.checkpoint.uri"


def normalized(entry: str) -> str:
    """An allowlist entry as it is compared: without a trailing slash."""
    return entry.rstrip("/")


def url_allowed(url: str, entries: Iterable[str]) -> bool:
    """Whether `url` is one of `entries`: the entry itself (a trailing slash aside), or, for an
    entry `scheme://host:*`, any port and path on that scheme and host (parsed, so
    `http://host:1@elsewhere` is elsewhere)."""
    return any(_matches(url, normalized(entry)) for entry in entries)


def _matches(url: str, entry: str) -> bool:
    if not entry.endswith(ANY_PORT):
        return url in (entry, entry + "/")
    given = origin(url)
    return given[1] != "" and given == origin(entry.removesuffix(ANY_PORT))


def origin(url: str) -> tuple[str, str]:
    """(scheme, host) of a URL in lower case, without user info, port or an IPv6 literal's
    brackets, as Go's url.Hostname gives it to the admission policy (urllib is off limits to
    pure code, so split by hand as RFC 3986 does)."""
    scheme, _, rest = url.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
    if authority.startswith("["):
        host = authority[1:].partition("]")[0]
    else:
        host = authority.partition(":")[0]
    return scheme.lower(), host.lower()


def bucket_of(uri: str) -> str:
    """The bucket of an s3://bucket/prefix URI."""
    return uri.removeprefix("s3://").split("/", 1)[0]


@dataclass(frozen=True)
class Allowlist:
    """The endpoints a job may name. The operator's own default Prometheus source and S3
    endpoint are always allowed (`with_defaults`); no endpoint set means that default (or AWS)."""

    prometheus_urls: tuple[str, ...] = ()
    s3_endpoints: tuple[str, ...] = ()
    s3_buckets: tuple[str, ...] = (ANY_BUCKET,)

    def with_defaults(self, prometheus_url: str | None, s3_endpoint: str | None) -> Allowlist:
        def plus(entries: tuple[str, ...], default: str | None) -> tuple[str, ...]:
            return (*entries, default) if default else entries

        return Allowlist(
            plus(self.prometheus_urls, prometheus_url),
            plus(self.s3_endpoints, s3_endpoint),
            self.s3_buckets,
        )

    def violations(self, spec: RLJobSpec) -> list[FieldViolation]:
        """Each field of `spec` that names an endpoint or bucket outside the allowlist."""
        found: list[FieldViolation] = []
        source = spec.health.source.prometheus if spec.health.source else None
        if source is not None and not url_allowed(source.url, self.prometheus_urls):
            found.append(
                _refusal(PROMETHEUS_FIELD, source.url, "Prometheus URLs", self.prometheus_urls)
            )
        store = spec.checkpoint
        if store is None:
            return found
        if store.endpoint and not url_allowed(store.endpoint, self.s3_endpoints):
            found.append(
                _refusal(ENDPOINT_FIELD, store.endpoint, "S3 endpoints", self.s3_endpoints)
            )
        if not self.bucket_allowed(bucket_of(store.uri)):
            found.append(
                _refusal(BUCKET_FIELD, bucket_of(store.uri), "S3 buckets", self.s3_buckets)
            )
        return found

    def bucket_allowed(self, bucket: str) -> bool:
        return ANY_BUCKET in self.s3_buckets or bucket in self.s3_buckets


def _refusal(field: str, value: str, what: str, allowed: tuple[str, ...]) -> FieldViolation:
    listed = ", ".join(allowed) if allowed else "none"
    return FieldViolation(
        field,
        f"{value!r} is not among the {what} this cluster allows jobs to use "
        f"(allowed: {listed}); the platform sets them in the chart's values",
    )
