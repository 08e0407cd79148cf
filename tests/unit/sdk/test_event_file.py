"""rljob.sdk.event_file: TFRecord framing and the Event fields a scalar uses, read with the
standard library; a partly flushed record waits for the next read, a corrupt one is skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from rljob.sdk.event_file import EventFile, Scalar, encode_record, event_scalars, masked_crc32c
from tests.unit.sdk.event_records import append, event, file_version


@pytest.mark.parametrize(
    ("data", "crc"),
    [
        # CRC-32C check value (RFC 3720 B.4: 32 bytes of zeros -> 0x8A9136AA), masked.
        pytest.param(bytes(32), ((0x8A9136AA >> 15 | 0x8A9136AA << 17) + 0xA282EAD8) & 0xFFFFFFFF,
                     id="rfc3720-zeros"),
        pytest.param(b"", (0xA282EAD8) & 0xFFFFFFFF, id="empty"),
    ],
)  # fmt: skip
def test_masked_crc32c(data: bytes, crc: int) -> None:
    assert masked_crc32c(data) == crc


@pytest.mark.parametrize("as_tensor", [False, True], ids=["simple-value", "scalar-tensor"])
def test_an_events_scalars(as_tensor: bool) -> None:
    record = event(7, {"actor/pg_clipfrac": 0.25, "critic/score/mean": 0.5}, as_tensor=as_tensor)

    assert event_scalars(record) == [
        Scalar("actor/pg_clipfrac", 7, 0.25, 1.0e9),
        Scalar("critic/score/mean", 7, 0.5, 1.0e9),
    ]


def test_a_file_header_has_no_scalars() -> None:
    assert event_scalars(file_version()) == []


def test_records_are_read_once_and_a_partial_record_waits(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.host"
    append(path, file_version(), event(1, {"a": 1.0}))
    follower = EventFile(path)
    assert [s.step for s in follower.read_new()] == [1]
    assert follower.read_new() == []

    whole = encode_record(event(2, {"a": 2.0}))
    with path.open("ab") as stream:
        stream.write(whole[:10])  # the writer flushed part of the header
    assert follower.read_new() == []
    with path.open("ab") as stream:
        stream.write(whole[10:-3])  # all but the data's checksum
    assert follower.read_new() == []
    with path.open("ab") as stream:
        stream.write(whole[-3:])
    assert [(s.step, s.value) for s in follower.read_new()] == [(2, 2.0)]


def test_a_corrupt_record_is_skipped_and_a_broken_length_ends_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.2.host"
    bad = bytearray(encode_record(event(1, {"a": 1.0})))
    bad[20] ^= 0xFF  # inside the data: its checksum fails
    path.write_bytes(bytes(bad) + encode_record(event(2, {"a": 2.0})))
    follower = EventFile(path)
    assert [s.step for s in follower.read_new()] == [2]
    assert follower.skipped == 1

    append(path, b"")
    with path.open("ab") as stream:
        stream.write(b"\xff" * 16)  # a length whose checksum fails
    append(path, event(3, {"a": 3.0}))
    assert follower.read_new() == []
    assert follower.broken is not None


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(b"\x10" + b"\xff" * 200 + b"\x01", id="step-varint-past-64-bits"),
        pytest.param(b"\x2a\x05\x0a\x03\x0a\x01", id="truncated-summary"),
        pytest.param(b"\x0f", id="unknown-wire-type"),
        pytest.param(b"\x2a\x0c\x0a\x0a\x0a\x01a\x42\x05\x38" + b"\xff" * 3, id="bad-tensor"),
    ],
)
def test_a_checksummed_but_malformed_record_is_skipped(tmp_path: Path, record: bytes) -> None:
    path = tmp_path / "events.out.tfevents.3.host"
    path.write_bytes(encode_record(record) + encode_record(event(2, {"a": 2.0})))
    follower = EventFile(path)
    assert [s.step for s in follower.read_new()] == [2]
    assert follower.skipped == 1


def test_a_missing_file_reads_nothing(tmp_path: Path) -> None:
    assert EventFile(tmp_path / "gone").read_new() == []
