"""The base of the SDK's custom collectors without importing prometheus_client: rljob-sdk requires
boto3 only, so a trainer image may lack it, and the exporters import it when they are made. A
registry takes any object with collect() and describe(); prometheus_client's Collector ABC is for
the type checker, `object` at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.registry import Collector
else:
    Collector = object

__all__ = ["Collector"]
