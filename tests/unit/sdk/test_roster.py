"""EngineRoster's diffing: which callbacks one roster update fires, in which order, and how the
roster is read out of an RLJob object."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.sdk.roster import Engine, EngineRoster, _Run, engines_of, transitions


def engine(
    pod: str,
    state: str,
    address: str | None = None,
    generation: int | None = None,
    restarts: int = 0,
    required: int | None = None,
) -> Engine:
    ip = f"10.0.0.{pod[-1]}" if address is None else address
    return Engine(
        pod=pod,
        address=ip,
        state=state,
        generation=generation,
        required_generation=required,
        restarts=restarts,
    )


def roster(*engines: Engine) -> dict[str, Engine]:
    return {e.pod: e for e in engines}


def events(before: dict[str, Engine], after: dict[str, Engine]) -> list[str]:
    return [f"{event}:{e.pod}" for event, e in transitions(before, after)]


DIFFS = [
    pytest.param(roster(), roster(), [], id="nothing-nothing"),
    pytest.param(roster(), roster(engine("e1", "joining")), ["join:e1"], id="appears-joining"),
    pytest.param(
        roster(), roster(engine("e1", "serving")), ["join:e1", "serving:e1"], id="appears-serving"
    ),
    pytest.param(roster(), roster(engine("e1", "draining")), ["drain:e1"], id="appears-draining"),
    pytest.param(
        roster(engine("e1", "joining")),
        roster(engine("e1", "serving")),
        ["serving:e1"],
        id="joining-to-serving",
    ),
    pytest.param(
        roster(engine("e1", "serving")),
        roster(engine("e1", "draining")),
        ["drain:e1"],
        id="serving-to-draining",
    ),
    pytest.param(
        roster(engine("e1", "draining")),
        roster(engine("e1", "draining", generation=4)),
        [],
        id="still-draining",
    ),
    pytest.param(roster(engine("e1", "draining")), roster(), ["leave:e1"], id="drained-leaves"),
    pytest.param(
        roster(engine("e1", "serving")),
        roster(engine("e1", "joining")),
        [],
        id="lost-readiness-fires-nothing",
    ),
    pytest.param(
        roster(engine("e1", "joining")),
        roster(engine("e1", "joining")),
        [],
        id="unchanged",
    ),
    pytest.param(
        roster(engine("e1", "serving", generation=3)),
        roster(engine("e1", "serving", generation=4)),
        [],
        id="generation-only",
    ),
    pytest.param(
        roster(engine("e1", "draining")),
        roster(engine("e1", "serving")),
        ["serving:e1"],
        id="drain-called-off",
    ),
    pytest.param(
        roster(engine("e1", "serving", address="10.0.0.1")),
        roster(engine("e1", "serving", address="10.0.0.9")),
        ["leave:e1", "join:e1", "serving:e1"],
        id="same-name-new-address-rejoins",
    ),
    pytest.param(
        roster(), roster(engine("e1", "joining", address="")), [], id="no-address-no-callback"
    ),
    pytest.param(
        roster(engine("e1", "joining", address="")),
        roster(engine("e1", "joining", address="10.0.0.1")),
        ["join:e1"],
        id="joins-once-it-has-an-address",
    ),
    pytest.param(
        roster(engine("e1", "joining", address="")), roster(), [], id="unreachable-leaves-quietly"
    ),
    pytest.param(
        roster(engine("e1", "serving"), engine("e2", "serving"), engine("e3", "draining")),
        roster(engine("e1", "draining"), engine("e2", "serving"), engine("e4", "serving")),
        ["drain:e1", "leave:e3", "join:e4", "serving:e4"],
        id="drain-leave-join-serve-in-one-update",
    ),
    pytest.param(
        roster(engine("e3", "serving"), engine("e1", "serving")),
        roster(engine("e3", "draining"), engine("e1", "draining"), engine("e2", "joining")),
        ["drain:e1", "drain:e3", "join:e2"],
        id="by-pod-name-within-an-event",
    ),
    pytest.param(
        roster(engine("e1", "serving"), engine("e2", "joining")),
        roster(),
        ["leave:e1", "leave:e2"],
        id="job-gone-everyone-leaves",
    ),
]

# A change of `restarts` is a new engine process behind the same pod: its communicator and
# weights died with the container, so the driver drops it and syncs it again.
RESTARTS = [
    pytest.param(
        roster(engine("e1", "serving")),
        roster(engine("e1", "joining", restarts=1)),
        ["leave:e1", "join:e1"],
        id="serving-restarts-in-place",
    ),
    pytest.param(
        roster(engine("e1", "serving")),
        roster(engine("e1", "serving", restarts=1)),
        ["leave:e1", "join:e1", "serving:e1"],
        id="restart-seen-already-serving-again",
    ),
    pytest.param(
        roster(engine("e1", "joining")),
        roster(engine("e1", "joining", restarts=1)),
        ["leave:e1", "join:e1"],
        id="joining-restarts-before-serving",
    ),
    pytest.param(
        roster(engine("e1", "draining")),
        roster(engine("e1", "draining", restarts=1)),
        ["drain:e1", "leave:e1"],  # drains come first in an update; nothing left to sync
        id="draining-restarts",
    ),
    pytest.param(
        roster(engine("e1", "joining", restarts=2)),
        roster(engine("e1", "serving", restarts=2)),
        ["serving:e1"],
        id="same-restarts-plain-transition",
    ),
    pytest.param(
        roster(),
        roster(engine("e1", "serving", restarts=3)),
        ["join:e1", "serving:e1"],
        id="first-seen-with-restarts-joins-once",
    ),
    pytest.param(
        roster(engine("e1", "joining", address="", restarts=0)),
        roster(engine("e1", "joining", restarts=1)),
        ["join:e1"],
        id="restart-before-an-address-is-just-a-join",
    ),
    pytest.param(
        roster(engine("e1", "serving"), engine("e2", "serving"), engine("e3", "draining")),
        roster(
            engine("e1", "joining", restarts=1),
            engine("e2", "draining"),
            engine("e3", "draining", restarts=1),
        ),
        ["drain:e2", "drain:e3", "leave:e1", "leave:e3", "join:e1"],
        id="restarts-keep-the-callback-order",
    ),
    pytest.param(
        roster(engine("e1", "joining", required=4)),
        roster(engine("e1", "joining", required=6)),
        [],
        id="required-generation-only",
    ),
]


@pytest.mark.parametrize(("before", "after", "expected"), DIFFS + RESTARTS)
def test_one_update_fires_callbacks_in_order(
    before: dict[str, Engine], after: dict[str, Engine], expected: list[str]
) -> None:
    assert events(before, after) == expected


def job(*members: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"roles": {"rollout": {"engines": list(members)}}}}


READS = [
    pytest.param(None, {}, id="no-job"),
    pytest.param({"metadata": {"name": "j"}}, {}, id="no-status"),
    pytest.param({"status": {"roles": {"trainer": {"ready": 1}}}}, {}, id="no-rollout"),
    pytest.param({"status": {"roles": {"rollout": {"ready": 0}}}}, {}, id="no-engines"),
    pytest.param(
        job({"pod": "e1", "address": "10.1.0.4", "state": "serving", "generation": 7}),
        roster(Engine("e1", "10.1.0.4", "serving", 7)),
        id="member-of-an-older-operator",
    ),
    pytest.param(
        job(
            {
                "pod": "e1",
                "address": "10.1.0.4",
                "state": "joining",
                "generation": 5,
                "requiredGeneration": 7,
                "restarts": 2,
            }
        ),
        roster(Engine("e1", "10.1.0.4", "joining", 5, required_generation=7, restarts=2)),
        id="full-member",
    ),
    pytest.param(
        job({"pod": "e1", "state": "joining"}),
        roster(Engine("e1", "", "joining", None, required_generation=None, restarts=0)),
        id="defaults",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), READS)
def test_the_roster_is_read_from_status(
    obj: dict[str, Any] | None, expected: dict[str, Engine]
) -> None:
    assert engines_of(obj) == expected


def test_a_raising_callback_is_logged_and_the_others_still_fire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fired: list[str] = []

    def broken(e: Engine) -> None:
        raise RuntimeError(f"driver bug on {e.pod}")

    driver = EngineRoster(
        "job",
        "ns",
        api_server="http://127.0.0.1:1",
        on_join=broken,
        on_serving=lambda e: fired.append(f"serving:{e.pod}"),
    )
    driver._apply(job({"pod": "e1", "address": "10.0.0.1", "state": "serving"}))
    assert fired == ["serving:e1"]
    assert "on_join callback failed for e1" in caplog.text
    assert [e.pod for e in driver.serving()] == ["e1"]


def test_an_update_from_a_stopped_run_is_dropped() -> None:
    fired: list[str] = []
    driver = EngineRoster(
        "job", "ns", api_server="http://127.0.0.1:1", on_join=lambda e: fired.append(e.pod)
    )
    current, stopped = _Run(driver), _Run(driver)
    stopped.stop()
    driver._apply(job({"pod": "e1", "address": "10.0.0.1", "state": "joining"}), current)
    driver._apply(job(), stopped)  # an older list, read by a thread that outlived stop()
    assert set(driver.engines()) == {"e1"}
    assert fired == ["e1"]


def test_a_callback_sees_the_new_snapshot() -> None:
    seen: list[list[str]] = []
    driver = EngineRoster("job", "ns", api_server="http://127.0.0.1:1")
    driver._callbacks["serving"] = lambda _: seen.append([e.pod for e in driver.serving()])
    driver._apply(
        job(
            {"pod": "e1", "address": "10.0.0.1", "state": "serving"},
            {"pod": "e2", "address": "10.0.0.2", "state": "serving"},
        )
    )
    assert seen == [["e1", "e2"], ["e1", "e2"]]


DEFAULTS = [
    pytest.param({}, "name", id="no-name"),
    pytest.param({"RLJOB_NAME": "job"}, "namespace", id="no-namespace"),
    pytest.param({"RLJOB_NAME": "job", "RLJOB_NAMESPACE": "ns"}, "api_server", id="no-server"),
]


@pytest.mark.parametrize(("env", "missing"), DEFAULTS)
def test_outside_a_pod_the_missing_setting_is_named(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], missing: str
) -> None:
    for var in ("RLJOB_NAME", "RLJOB_NAMESPACE", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=f"needs {missing}"):
        EngineRoster()


SERVERS = [
    pytest.param("10.96.0.1", "443", "https://10.96.0.1:443", id="ipv4"),
    pytest.param("fd00::1", "6443", "https://[fd00::1]:6443", id="ipv6"),
]


@pytest.mark.parametrize(("host", "port", "server"), SERVERS)
def test_in_a_pod_everything_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, host: str, port: str, server: str
) -> None:
    monkeypatch.setenv("RLJOB_NAME", "job")
    monkeypatch.setenv("RLJOB_NAMESPACE", "team")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    driver = EngineRoster()
    assert (driver.name, driver.namespace) == ("job", "team")
    assert driver.endpoint.server == server
    assert driver._lister.field_selector == "metadata.name=job"
    assert driver._lister.collection == "/apis/rljob.io/v1alpha1/namespaces/team/rljobs"
