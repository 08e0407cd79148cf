"""Stores without conditional writes: the store still works (correctness never depends on them),
and the probe says so. A stand-in client plays the store."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from rljob.checkpoint_protocol.s3 import CheckpointStore, ClientCache, StoreEndpoint

from ._build import LOC, v


class FakeS3:
    """put_object/get_object/delete_object on a dict; `conditions`: honour, ignore or reject."""

    def __init__(self, conditions: str) -> None:
        self.conditions = conditions
        self.objects: dict[str, bytes] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def put_object(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("put_object", kw))
        conditional = "IfNoneMatch" in kw or "IfMatch" in kw
        if conditional and self.conditions == "reject":
            raise _error("NotImplemented", 501)
        if (
            self.conditions == "honour"
            and kw.get("IfNoneMatch") == "*"
            and kw["Key"] in self.objects
        ):
            raise _error("PreconditionFailed", 412)
        self.objects[kw["Key"]] = kw["Body"]
        return {"ETag": '"e"'}

    def get_object(self, **kw: Any) -> dict[str, Any]:
        raise _error("NoSuchKey", 404)

    def delete_object(self, **kw: Any) -> dict[str, Any]:
        self.objects.pop(kw["Key"], None)
        return {}


def _error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
    )


class FakeClients(ClientCache):
    def __init__(self, fake: FakeS3) -> None:
        super().__init__()
        self.fake = fake

    def client(self, endpoint: StoreEndpoint) -> Any:
        return self.fake


@pytest.mark.parametrize(
    ("conditions", "works", "puts"),
    [
        pytest.param("honour", True, 2, id="honoured"),
        pytest.param("ignore", False, 2, id="ignored"),
        pytest.param("reject", False, 1, id="rejected-as-unsupported"),
    ],
)
def test_probe(conditions: str, works: bool, puts: int) -> None:
    fake = FakeS3(conditions)
    store = CheckpointStore(LOC, StoreEndpoint("http://fake"), clients=FakeClients(fake))
    caps = store.probe_capabilities()
    assert caps.conditional_writes is works
    assert [name for name, _ in fake.calls].count("put_object") == puts
    assert fake.objects == {}  # the probe object is deleted
    assert store.probe_capabilities() is caps  # cached per endpoint


@pytest.mark.parametrize("conditions", ["ignore", "reject"])
def test_writes_work_without_conditional_support(conditions: str) -> None:
    fake = FakeS3(conditions)
    store = CheckpointStore(LOC, StoreEndpoint("http://fake"), clients=FakeClients(fake))
    key = LOC.manifest_key(v(10, 1))
    store.put_bytes(key, b"manifest", if_none_match=True)
    assert fake.objects[key] == b"manifest"
    assert store.write_pointer(v(10, 1))
    assert LOC.pointer_key in fake.objects
    assert store.requests == len(fake.calls) + 1  # + the pointer read
