"""Event records for the event-file reader's and the bridge's tests (rljob.dev.event_records
writes them), appended to a file as a writer flushes them."""

from __future__ import annotations

from pathlib import Path

from rljob.dev.event_records import event, file_version
from rljob.sdk.event_file import encode_record

__all__ = ["append", "event", "file_version"]


def append(path: Path, *records: bytes) -> None:
    with path.open("ab") as stream:
        for record in records:
            stream.write(encode_record(record))
