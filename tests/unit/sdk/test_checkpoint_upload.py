"""A shard is read once: its sha256 and size come from the pass that uploads it (single put or
multipart), and they equal hashlib's over the file."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import pytest

from rljob.checkpoint_protocol.layout import CheckpointLocation
from rljob.sdk.checkpoint import MIN_PART_SIZE, CheckpointWriter, MiB
from rljob.sdk.checkpoint import writer as writer_module
from rljob.sdk.checkpoint.upload import HashingReader

THRESHOLD = MIN_PART_SIZE


class RecordingStore:
    """The store calls a shard upload makes; parts joined into the object they complete."""

    bucket = "ckpt"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.parts: dict[str, list[bytes]] = {}

    def put_bytes(self, key: str, data: bytes, **_: Any) -> None:
        self.objects[key] = data

    def call(self, operation: str, **kw: Any) -> dict[str, Any]:
        if operation == "create_multipart_upload":
            self.parts[kw["Key"]] = []
            return {"UploadId": kw["Key"]}
        if operation == "upload_part":
            self.parts[kw["Key"]].append(kw["Body"])
            return {"ETag": f"e{kw['PartNumber']}"}
        assert operation == "complete_multipart_upload"
        self.objects[kw["Key"]] = b"".join(self.parts.pop(kw["Key"]))
        return {}


class CountingFile(io.BufferedReader):
    """A file that counts the bytes handed out and refuses to be rewound."""

    handed_out = 0

    def read(self, size: int | None = -1, /) -> bytes:
        chunk = super().read(size)
        CountingFile.handed_out += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = 0, /) -> int:
        raise AssertionError("the shard was rewound to be read again")


def counting_open(path: str | os.PathLike[str], mode: str = "r", **_: Any) -> CountingFile:
    assert mode == "rb"
    return CountingFile(io.FileIO(path, "rb"))


def writer(store: RecordingStore) -> CheckpointWriter:
    location = CheckpointLocation("ckpt", "root", "rl", "grpo")
    return CheckpointWriter(
        location,
        1,
        multipart_threshold=THRESHOLD,
        part_size=MIN_PART_SIZE,
        check_newer_attempt=False,
        store=store,  # type: ignore[arg-type]
    )


SIZES = [
    pytest.param(0, id="empty"),
    pytest.param(1234, id="small-single-put"),
    pytest.param(THRESHOLD, id="at-threshold-single-put"),
    pytest.param(THRESHOLD + 1, id="one-byte-over-multipart"),
    pytest.param(3 * MIN_PART_SIZE + 7, id="four-parts"),
]


@pytest.mark.parametrize("size", SIZES)
def test_write_file_reads_the_shard_once_and_records_hashlibs_checksum(
    size: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(size)
    path = tmp_path / "shard.bin"
    path.write_bytes(data)
    monkeypatch.setattr(writer_module, "open", counting_open, raising=False)
    CountingFile.handed_out = 0
    store = RecordingStore()
    version = writer(store).version(10, commit=False)

    entry = version.write_file("model/rank0.pt", path)

    assert CountingFile.handed_out == size  # every byte read exactly once
    assert entry.sha256 == hashlib.sha256(data).hexdigest()
    assert entry.size == size
    assert store.objects[version.writer.location.shard_key(version.version, entry.key)] == data


@pytest.mark.parametrize("size", SIZES)
def test_write_stream_checksums_a_stream_with_only_read(size: int) -> None:
    data = os.urandom(size)
    store = RecordingStore()
    version = writer(store).version(10, commit=False)

    entry = version.write_stream("model/rank0.pt", HashingReader(io.BytesIO(data)))

    assert (entry.size, entry.sha256) == (size, hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize(
    "reads",
    [
        pytest.param([-1], id="all-at-once"),
        pytest.param([1, 2, MiB, -1], id="pieces-then-rest"),
        pytest.param([10, 10, 10], id="past-the-end"),
    ],
)
def test_hashing_reader_hashes_exactly_what_it_hands_out(reads: list[int]) -> None:
    data = bytes(range(256)) * 7
    reader = HashingReader(io.BytesIO(data))
    handed = b"".join(reader.read(n) for n in reads)
    assert reader.size == len(handed)
    assert reader.hexdigest() == hashlib.sha256(handed).hexdigest()
