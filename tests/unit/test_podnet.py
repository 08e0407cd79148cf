"""Each local plane's pod range: inside 127.0.0.0/8, distinct while held, free once released or
once its holder is gone."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest

from rljob.dev import podnet

GONE_PID = 2**22 + 7  # above pid_max's default: never a running process


@pytest.fixture(autouse=True)
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLJOB_PODNET_LOCKS", str(tmp_path))
    return tmp_path


def test_ranges_held_at_once_differ_and_are_loopback() -> None:
    first, second = podnet.reserve(os.getpid()), podnet.reserve(os.getpid())
    assert first != second
    for cidr in (first, second):
        network = ipaddress.ip_network(cidr)
        assert network.prefixlen == 16 and network.is_loopback
        assert ipaddress.ip_address("127.0.0.1") not in network


def test_a_released_range_is_handed_out_again() -> None:
    first = podnet.reserve(os.getpid())
    podnet.release(first, os.getpid())
    assert podnet.reserve(os.getpid()) == first


def test_a_range_whose_holder_is_gone_is_taken_over(locks: Path) -> None:
    first = podnet.reserve(GONE_PID)
    assert podnet.reserve(GONE_PID) == first  # the same start, and the holder is not running


def test_release_by_another_owner_keeps_the_range() -> None:
    first = podnet.reserve(os.getpid())
    podnet.release(first, os.getpid() + 1)
    assert podnet.reserve(os.getpid()) != first
