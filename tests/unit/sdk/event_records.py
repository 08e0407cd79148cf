"""TensorBoard Event records written by hand (protobuf wire format), for the event-file reader's
and the bridge's tests; tests/upstream/test_tensorboard_writer.py reads the real writer's."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

from rljob.sdk.event_file import encode_record

DT_FLOAT, DT_DOUBLE = 1, 2


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire) + payload


def _bytes(number: int, payload: bytes) -> bytes:
    return _field(number, 2, _varint(len(payload)) + payload)


def scalar_value(tag: str, value: float, *, as_tensor: bool = False) -> bytes:
    """A Summary.Value: simple_value (torch's add_scalar), or a DT_DOUBLE tensor (tf2's)."""
    if as_tensor:
        tensor = _field(1, 0, _varint(DT_DOUBLE)) + _bytes(4, struct.pack("<d", value))
        return _bytes(1, tag.encode()) + _bytes(8, tensor)
    return _bytes(1, tag.encode()) + _field(2, 5, struct.pack("<f", value))


def event(
    step: int, scalars: Mapping[str, float], *, wall_time: float = 1.0e9, as_tensor: bool = False
) -> bytes:
    summary = b"".join(
        _bytes(1, scalar_value(t, v, as_tensor=as_tensor)) for t, v in scalars.items()
    )
    return (
        _field(1, 1, struct.pack("<d", wall_time))
        + _field(2, 0, _varint(step))
        + _bytes(5, summary)
    )


def file_version() -> bytes:
    """The first record every writer puts in a file (Event.file_version, field 3)."""
    return _field(1, 1, struct.pack("<d", 1.0e9)) + _bytes(3, b"brain.Event:2")


def append(path: Path, *records: bytes) -> None:
    with path.open("ab") as stream:
        for record in records:
            stream.write(encode_record(record))
