"""`rljob run --namespace`: the namespaces the operator acts in. Names scope kopf's watches (a
namespaced install); a pattern watches every namespace and the handlers keep those that match."""

from __future__ import annotations

import pytest

from rljob.cli import _parser
from rljob.runtime.runtime import RuntimeOptions

NAMESPACES = ("gw0-a", "gw1-a", "team-b", "kube-system")


@pytest.mark.parametrize(
    ("flags", "clusterwide", "acts_in"),
    [
        pytest.param((), True, set(NAMESPACES), id="every-namespace"),
        pytest.param(("--namespace=team-b",), False, {"team-b"}, id="one-name"),
        pytest.param(
            ("--namespace=team-b", "--namespace=gw0-a"), False, {"team-b", "gw0-a"}, id="names"
        ),
        pytest.param(("--namespace=gw0-*",), True, {"gw0-a"}, id="a-pattern"),
        pytest.param(("--namespace=gw?-a",), True, {"gw0-a", "gw1-a"}, id="one-character"),
        pytest.param(
            ("--namespace=!kube-*",), True, {"gw0-a", "gw1-a", "team-b"}, id="an-exclusion"
        ),
        pytest.param(
            ("--namespace=gw*", "--namespace=!gw1-*"), True, {"gw0-a"}, id="a-pattern-less-one"
        ),
        pytest.param(("--namespace=gw",), False, set(), id="a-name-is-no-prefix"),
    ],
)
def test_the_namespaces_the_operator_acts_in(
    flags: tuple[str, ...], clusterwide: bool, acts_in: set[str]
) -> None:
    options = RuntimeOptions(namespaces=tuple(_parser().parse_args(["run", *flags]).namespace))
    assert options.clusterwide is clusterwide
    assert {ns for ns in NAMESPACES if options.watches(ns)} == acts_in
    assert options.watches(None), "cluster-scoped objects (nodes) are always in scope"
