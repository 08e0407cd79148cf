"""TensorBoard event files read with the standard library, so that the SDK needs neither
tensorboard nor protobuf: the TFRecord framing and the few Event and Summary fields a scalar uses.

A file is a sequence of records (tensorflow/core/lib/io/record_writer.cc, tensorboard's
`tensorboard/summary/writer/record_writer.py`):

    uint64 length | uint32 masked crc32c(length) | data[length] | uint32 masked crc32c(data)

each `data` an `Event` (tensorboard/compat/proto/event.proto): `wall_time` (1, double), `step`
(2, int64), `summary` (5). A `Summary` holds repeated `Value`s (summary.proto): `tag` (1) and
either `simple_value` (2, float; torch's and tensorboardX's add_scalar) or `tensor` (8, a
TensorProto with one element; tf.summary.scalar). Everything else is skipped.

A writer flushes records whole or in parts: a record not complete yet ends the read, and the
next read starts at that record again. A record whose checksum fails is skipped; a length whose
checksum fails means the framing is lost, and the rest of the file is not read.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_HEADER = 12  # length and its checksum
_FOOTER = 4
# Protobuf wire types.
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
# Event, Summary, Summary.Value and TensorProto field numbers (the .proto files above).
_EVENT_WALL_TIME, _EVENT_STEP, _EVENT_SUMMARY = 1, 2, 5
_SUMMARY_VALUE = 1
_VALUE_TAG, _VALUE_SIMPLE, _VALUE_TENSOR = 1, 2, 8
_TENSOR_DTYPE, _TENSOR_CONTENT = 1, 4
_TENSOR_FLOAT_VAL, _TENSOR_DOUBLE_VAL, _TENSOR_INT_VAL, _TENSOR_INT64_VAL = 5, 6, 7, 10
# tensorflow/core/framework/types.proto: the dtypes a scalar is written in, and their layout.
_CONTENT_FORMAT = {1: "<f", 2: "<d", 3: "<i", 9: "<q"}  # DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64


@dataclass(frozen=True, slots=True)
class Scalar:
    """One scalar a framework logged: its tag, step, value and the writer's wall time."""

    tag: str
    step: int
    value: float
    wall_time: float


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli), rotated and offset so that a CRC of data
    holding CRCs stays strong (record_writer.cc, MaskedCrc)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


MAX_VARINT_BYTES = 10  # a 64-bit value


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(MAX_VARINT_BYTES):
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, at
        shift += 7
    raise ValueError("varint longer than 64 bits")


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of one message: ints for varints and fixed fields
    (fixed ones as their raw little-endian integer), bytes for length-delimited ones."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire == _FIXED64:
            value, at = int.from_bytes(data[at : at + 8], "little"), at + 8
        elif wire == _FIXED32:
            value, at = int.from_bytes(data[at : at + 4], "little"), at + 4
        elif wire == _BYTES:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if at > len(data):
            raise ValueError("truncated field")
        yield number, wire, value


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _packed_first(wire: int, value: int | bytes, fmt: str) -> float | None:
    """The first element of a repeated numeric field, packed or not."""
    if isinstance(value, bytes):
        if fmt in ("<f", "<d"):
            size = struct.calcsize(fmt)
            return float(struct.unpack(fmt, value[:size])[0]) if len(value) >= size else None
        return float(_signed64(_varint(value, 0)[0])) if value else None
    if wire == _FIXED32:
        return float(struct.unpack("<f", value.to_bytes(4, "little"))[0])
    if wire == _FIXED64:
        return float(struct.unpack("<d", value.to_bytes(8, "little"))[0])
    return float(_signed64(value))


_REPEATED_FORMAT = {
    _TENSOR_FLOAT_VAL: "<f",
    _TENSOR_DOUBLE_VAL: "<d",
    _TENSOR_INT_VAL: "<i",
    _TENSOR_INT64_VAL: "<q",
}


def _tensor_value(data: bytes) -> float | None:
    """A scalar TensorProto's value: from tensor_content in its dtype, else the typed field."""
    dtype, content, typed = 0, b"", None
    for number, wire, value in _fields(data):
        if number == _TENSOR_DTYPE and isinstance(value, int):
            dtype = value
        elif number == _TENSOR_CONTENT and isinstance(value, bytes):
            content = value
        elif number in _REPEATED_FORMAT and typed is None:
            typed = _packed_first(wire, value, _REPEATED_FORMAT[number])
    fmt = _CONTENT_FORMAT.get(dtype)
    if content and fmt is not None and len(content) >= struct.calcsize(fmt):
        return float(struct.unpack(fmt, content[: struct.calcsize(fmt)])[0])
    return typed


def _summary_value(data: bytes) -> tuple[str, float] | None:
    tag, number_value = "", None
    for number, wire, value in _fields(data):
        if number == _VALUE_TAG and isinstance(value, bytes):
            tag = value.decode("utf-8", "replace")
        elif number == _VALUE_SIMPLE and wire == _FIXED32 and isinstance(value, int):
            number_value = struct.unpack("<f", value.to_bytes(4, "little"))[0]
        elif number == _VALUE_TENSOR and isinstance(value, bytes):
            number_value = _tensor_value(value)
    return (tag, float(number_value)) if tag and number_value is not None else None


def event_scalars(data: bytes) -> list[Scalar]:
    """The scalars of one serialised Event (none for a file header, a graph or a histogram)."""
    wall_time, step, summaries = 0.0, 0, []
    for number, wire, value in _fields(data):
        if number == _EVENT_WALL_TIME and wire == _FIXED64 and isinstance(value, int):
            wall_time = struct.unpack("<d", value.to_bytes(8, "little"))[0]
        elif number == _EVENT_STEP and isinstance(value, int):
            step = _signed64(value)
        elif number == _EVENT_SUMMARY and isinstance(value, bytes):
            summaries.append(value)
    scalars = []
    for summary in summaries:
        for number, _, value in _fields(summary):
            if number != _SUMMARY_VALUE or not isinstance(value, bytes):
                continue
            found = _summary_value(value)
            if found is not None and math.isfinite(wall_time):
                scalars.append(Scalar(found[0], step, found[1], wall_time))
    return scalars


@dataclass(slots=True)
class EventFile:
    """Follows one event file: each `read_new` returns the scalars of the records completed
    since the last read. `broken` is set when the framing is lost; `skipped` counts records
    whose checksum or contents failed."""

    path: Path
    offset: int = 0
    broken: str | None = None
    skipped: int = 0

    def read_new(self) -> list[Scalar]:
        if self.broken is not None:
            return []
        try:
            with self.path.open("rb") as stream:
                stream.seek(self.offset)
                data = stream.read()
        except OSError:
            return []  # rotated away or not readable yet: the next read tries again
        scalars: list[Scalar] = []
        at = 0
        while len(data) - at >= _HEADER:
            header = data[at : at + 8]
            (length,) = struct.unpack("<Q", header)
            if struct.unpack("<I", data[at + 8 : at + 12])[0] != masked_crc32c(header):
                self.broken = f"length checksum failed at byte {self.offset + at}"
                break
            end = at + _HEADER + length + _FOOTER
            if end > len(data):
                break  # partly flushed: read it whole next time
            record = data[at + _HEADER : at + _HEADER + length]
            if struct.unpack("<I", data[end - _FOOTER : end])[0] == masked_crc32c(record):
                scalars.extend(self._parsed(record))
            else:
                self.skipped += 1
            at = end
        self.offset += at
        return scalars

    def _parsed(self, record: bytes) -> list[Scalar]:
        try:
            return event_scalars(record)
        except Exception:  # a malformed record, whatever its fault, is skipped, never raised
            self.skipped += 1
            return []


def encode_record(data: bytes) -> bytes:
    """One TFRecord frame around `data` (the writer's side, for tests and fixtures)."""
    header = struct.pack("<Q", len(data))
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


__all__ = ["EventFile", "Scalar", "encode_record", "event_scalars", "masked_crc32c"]
