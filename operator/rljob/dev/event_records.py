"""TensorBoard Event records written with the standard library (protobuf wire format, the fields
rljob.sdk.event_file reads), for the simulator's frameworks and the reader's tests; what the
real writer writes is proven by tests/upstream/test_tensorboard_writer.py.

Event (tensorboard/compat/proto/event.proto): wall_time 1 (double), step 2 (int64), summary 5;
file_version 3 in a file's first record. Summary.Value: tag 1, simple_value 2 (float, torch's
add_scalar), tensor 8 (a TensorProto: dtype 1, tensor_content 4; tf.summary.scalar)."""

from __future__ import annotations

import struct
from collections.abc import Mapping

FILE_VERSION = b"brain.Event:2"
DT_DOUBLE = 2  # tensorflow/core/framework/types.proto


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
    """A Summary.Value: simple_value, or a DT_DOUBLE scalar tensor."""
    if as_tensor:
        tensor = _field(1, 0, _varint(DT_DOUBLE)) + _bytes(4, struct.pack("<d", value))
        return _bytes(1, tag.encode()) + _bytes(8, tensor)
    return _bytes(1, tag.encode()) + _field(2, 5, struct.pack("<f", value))


def event(
    step: int, scalars: Mapping[str, float], *, wall_time: float = 1.0e9, as_tensor: bool = False
) -> bytes:
    """One Event with a Summary of `scalars` (torch's add_scalar writes one per Event)."""
    values = (scalar_value(tag, value, as_tensor=as_tensor) for tag, value in scalars.items())
    summary = b"".join(_bytes(1, one) for one in values)
    return (
        _field(1, 1, struct.pack("<d", wall_time))
        + _field(2, 0, _varint(step))
        + _bytes(5, summary)
    )


def file_version(wall_time: float = 1.0e9) -> bytes:
    """The first record every writer puts in a file."""
    return _field(1, 1, struct.pack("<d", wall_time)) + _bytes(3, FILE_VERSION)


__all__ = ["event", "file_version", "scalar_value"]
