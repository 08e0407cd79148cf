"""EngineRoster against a fake API server speaking the list/watch protocol: it follows changes,
re-lists on 410 Gone, backs off through errors, re-reads a rotating token, survives a broken
callback, stops promptly, works without a thread (refresh, wait_until), refuses refresh()
while its thread runs, and never lets two threads feed it."""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rljob.sdk.roster import Engine, EngineRoster
from tests.helpers import wait_for

NAMESPACE, NAME = "team", "job"
COLLECTION = f"/apis/rljob.io/v1alpha1/namespaces/{NAMESPACE}/rljobs"
TIMEOUT = 10.0
END = object()  # ends one watch stream (as the server's timeoutSeconds would)


class FakeApi:
    """One RLJob in a fake API server; each change goes to every open watch."""

    def __init__(self) -> None:
        self.version = 1
        self.job: dict[str, Any] | None = {"metadata": {"name": NAME}, "status": {}}
        self.lists = 0
        self.watches = 0
        self.failing_lists = 0
        self.tokens: list[str] = []
        self.selectors: set[str] = set()
        self.streams: list[queue.Queue[object]] = []
        self.lock = threading.Lock()

    def set_engines(self, *members: dict[str, Any]) -> None:
        with self.lock:
            self.version += 1
            self.job = {
                "metadata": {"name": NAME, "resourceVersion": str(self.version)},
                "status": {"roles": {"rollout": {"engines": list(members)}}},
            }
            self._send({"type": "MODIFIED", "object": self.job})

    def delete(self) -> None:
        with self.lock:
            self.version += 1
            gone, self.job = self.job, None
            self._send({"type": "DELETED", "object": gone})

    def expire_watches(self) -> None:
        self._send({"type": "ERROR", "object": {"kind": "Status", "code": 410}})

    def end_watches(self) -> None:
        self._send(END)

    def _send(self, event: object) -> None:
        for stream in self.streams:
            stream.put(event)


def handler_for(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            api.tokens.append(self.headers.get("Authorization", ""))
            api.selectors.add(query.get("fieldSelector", ""))
            if url.path != COLLECTION:
                return self._reply(404, {"message": "not found"})
            if query.get("watch") == "1":
                return self._watch()
            api.lists += 1
            if api.failing_lists:
                api.failing_lists -= 1
                return self._reply(500, {"message": "etcd is sad"})
            with api.lock:
                items = [api.job] if api.job else []
                body = {"metadata": {"resourceVersion": str(api.version)}, "items": items}
            return self._reply(200, body)

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _watch(self) -> None:
            stream: queue.Queue[object] = queue.Queue()
            api.watches += 1
            api.streams.append(stream)
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while (event := stream.get()) is not END:
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass  # the client hung up
            finally:
                api.streams.remove(stream)
                self.close_connection = True

    return Handler


@pytest.fixture
def api() -> Iterator[tuple[FakeApi, str]]:
    fake = FakeApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    fake.end_watches()
    server.shutdown()
    server.server_close()


def member(
    pod: str, state: str, generation: int | None = None, restarts: int = 0
) -> dict[str, Any]:
    address = f"10.0.0.{pod[-1]}"
    return {
        "pod": pod,
        "address": address,
        "state": state,
        "generation": generation,
        "restarts": restarts,
    }


class Recorder:
    """Every callback as "event:pod", in firing order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def kwargs(self) -> dict[str, Any]:
        return {
            f"on_{event}": (lambda e, event=event: self.events.append(f"{event}:{e.pod}"))
            for event in ("join", "serving", "drain", "leave")
        }


def watching(api: FakeApi) -> bool:
    return len(api.streams) > 0


def test_the_watch_follows_the_roster_and_fires_in_order(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    fake.set_engines(member("e1", "serving", 3))
    seen = Recorder()
    with EngineRoster(NAME, NAMESPACE, api_server=server, token="t0k", **seen.kwargs()) as roster:
        wait_for(lambda: seen.events == ["join:e1", "serving:e1"], TIMEOUT, "the listed engine")
        wait_for(lambda: watching(fake), TIMEOUT, "a watch")
        fake.set_engines(member("e1", "draining", 3), member("e2", "joining"))
        wait_for(lambda: len(seen.events) == 4, TIMEOUT, "drain and join")
        fake.set_engines(member("e2", "serving", 4))
        assert roster.wait_until(lambda engines: set(engines) == {"e2"}, TIMEOUT)
        assert roster.serving() == [Engine("e2", "10.0.0.2", "serving", 4)]
        fake.delete()
        assert roster.wait_until(lambda engines: not engines, TIMEOUT)
    assert seen.events == [
        "join:e1",
        "serving:e1",
        "drain:e1",
        "join:e2",
        "leave:e1",
        "serving:e2",
        "leave:e2",
    ]
    assert set(fake.tokens) == {"Bearer t0k"}
    assert fake.selectors == {f"metadata.name={NAME}"}


def test_410_gone_lists_again_and_the_watch_goes_on(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    with EngineRoster(NAME, NAMESPACE, api_server=server) as roster:
        wait_for(lambda: watching(fake), TIMEOUT, "a watch")
        fake.expire_watches()
        wait_for(lambda: fake.lists == 2 and watching(fake), TIMEOUT, "a second list and watch")
        fake.set_engines(member("e1", "joining"))
        assert roster.wait_until(lambda engines: "e1" in engines, TIMEOUT)


def test_an_ended_watch_resumes_without_listing(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    with EngineRoster(NAME, NAMESPACE, api_server=server) as roster:
        wait_for(lambda: watching(fake), TIMEOUT, "a watch")
        fake.end_watches()
        wait_for(lambda: fake.watches == 2 and watching(fake), TIMEOUT, "a second watch")
        fake.set_engines(member("e1", "joining"))
        assert roster.wait_until(lambda engines: "e1" in engines, TIMEOUT)
    assert fake.lists == 1


def test_errors_back_off_and_recover(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    fake.failing_lists = 2
    fake.set_engines(member("e1", "serving"))
    with EngineRoster(NAME, NAMESPACE, api_server=server) as roster:
        assert roster.wait_until(lambda engines: "e1" in engines, TIMEOUT)
    assert fake.lists == 3


def test_a_token_file_is_read_again_on_every_connect(
    api: tuple[FakeApi, str], tmp_path: Path
) -> None:
    fake, server = api
    token = tmp_path / "token"
    token.write_text("first\n")
    with EngineRoster(NAME, NAMESPACE, api_server=server, token=token):
        wait_for(lambda: watching(fake), TIMEOUT, "a watch")
        token.write_text("rotated\n")
        fake.end_watches()
        wait_for(lambda: fake.watches == 2, TIMEOUT, "a second watch")
    assert fake.tokens == ["Bearer first", "Bearer first", "Bearer rotated"]


def test_a_callable_token_is_asked_on_every_connect(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    issued = iter(f"token-{n}" for n in range(100))
    roster = EngineRoster(NAME, NAMESPACE, api_server=server, token=lambda: next(issued))
    roster.refresh()
    roster.refresh()
    assert fake.tokens == ["Bearer token-0", "Bearer token-1"]


def test_a_broken_callback_does_not_stop_the_watch(api: tuple[FakeApi, str]) -> None:
    fake, server = api

    def broken(_: Engine) -> None:
        raise RuntimeError("driver bug")

    with EngineRoster(NAME, NAMESPACE, api_server=server, on_join=broken) as roster:
        wait_for(lambda: watching(fake), TIMEOUT, "a watch")
        fake.set_engines(member("e1", "joining"))
        assert roster.wait_until(lambda engines: "e1" in engines, TIMEOUT)
        fake.set_engines(member("e1", "serving"))
        assert roster.wait_until(lambda _: len(roster.serving()) == 1, TIMEOUT)
    assert (fake.lists, fake.watches) == (1, 1)


def test_stop_ends_a_blocked_watch_at_once(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    roster = EngineRoster(NAME, NAMESPACE, api_server=server).start()
    wait_for(lambda: watching(fake), TIMEOUT, "a watch")
    assert roster._current is not None
    thread = roster._current.thread
    started = time.monotonic()
    roster.stop()
    assert thread is not None and not thread.is_alive()
    assert time.monotonic() - started < 2.0


def test_without_a_thread_refresh_and_wait_until_poll(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    seen = Recorder()
    roster = EngineRoster(NAME, NAMESPACE, api_server=server, **seen.kwargs())
    fake.set_engines(member("e1", "joining"))
    assert set(roster.refresh()) == {"e1"}
    assert seen.events == ["join:e1"]
    fake.set_engines(member("e1", "serving"))
    assert roster.wait_until(lambda _: len(roster.serving()) == 1, TIMEOUT)
    assert seen.events == ["join:e1", "serving:e1"]
    assert not roster.wait_until(lambda engines: "e9" in engines, 0.1)
    assert fake.watches == 0


def test_an_in_place_restart_is_a_leave_and_a_join(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    fake.set_engines(member("e1", "serving", 3))
    seen = Recorder()
    with EngineRoster(NAME, NAMESPACE, api_server=server, **seen.kwargs()) as roster:
        wait_for(lambda: watching(fake), TIMEOUT, "a watch")
        fake.set_engines(member("e1", "joining", 3, restarts=1))
        assert roster.wait_until(lambda engines: engines["e1"].restarts == 1, TIMEOUT)
        fake.set_engines(member("e1", "serving", 5, restarts=1))
        assert roster.wait_until(lambda _: len(roster.serving()) == 1, TIMEOUT)
    assert seen.events == ["join:e1", "serving:e1", "leave:e1", "join:e1", "serving:e1"]


def test_refresh_is_refused_while_the_watch_thread_runs(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    fake.set_engines(member("e1", "serving"))
    roster = EngineRoster(NAME, NAMESPACE, api_server=server).start()
    try:
        assert roster.wait_until(lambda engines: "e1" in engines, TIMEOUT)
        with pytest.raises(RuntimeError, match="while the watch thread runs"):
            roster.refresh()
        assert roster.wait_until(lambda engines: "e1" in engines, 0.1)
        assert fake.lists == 1  # neither refresh() nor wait_until() listed beside the watch
    finally:
        roster.stop()
    fake.set_engines(member("e2", "joining"))
    assert set(roster.refresh()) == {"e2"}


def test_a_start_during_refreshs_list_wins(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    seen = Recorder()
    roster = EngineRoster(NAME, NAMESPACE, api_server=server, **seen.kwargs())
    engines = [member("e9", "serving")]
    stale = {"metadata": {"name": NAME}, "status": {"roles": {"rollout": {"engines": engines}}}}

    def list_while_starting() -> tuple[list[dict[str, Any]], str]:
        roster.start()  # the thread lists too, then waits for refresh's update lock
        wait_for(lambda: fake.lists == 1, TIMEOUT, "the thread's list")
        return [stale], "1"

    roster._lister.list = list_while_starting  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match="while the watch thread runs"):
            roster.refresh()
        wait_for(lambda: watching(fake), TIMEOUT, "the thread's watch")
        fake.set_engines(member("e1", "joining"))
        assert roster.wait_until(lambda engines: "e1" in engines, TIMEOUT)
    finally:
        roster.stop()
    assert seen.events == ["join:e1"]  # refresh's list was never applied


def test_start_after_a_stop_that_timed_out_runs_one_thread(api: tuple[FakeApi, str]) -> None:
    fake, server = api
    entered, release = threading.Event(), threading.Event()
    seen = Recorder()
    callbacks = seen.kwargs()
    record_join = callbacks["on_join"]

    def slow_join(engine: Engine) -> None:
        record_join(engine)
        if engine.pod == "e1":
            entered.set()
            release.wait(TIMEOUT)

    fake.set_engines(member("e1", "joining"))
    roster = EngineRoster(NAME, NAMESPACE, api_server=server, **{**callbacks, "on_join": slow_join})
    roster.start()
    try:
        assert entered.wait(TIMEOUT)
        assert roster._current is not None
        stuck = roster._current.thread
        roster.stop(timeout=0.1)
        assert stuck.is_alive()  # still in on_join
        fake.set_engines(member("e2", "joining"))
        roster.start()
        assert roster._current is not None and roster._current.thread is not stuck
        release.set()
        wait_for(lambda: not stuck.is_alive(), TIMEOUT, "the stopped run's thread to end")
        wait_for(lambda: watching(fake), TIMEOUT, "the new run's watch")
        fake.set_engines(member("e2", "serving"))
        assert roster.wait_until(lambda _: len(roster.serving()) == 1, TIMEOUT)
    finally:
        release.set()
        roster.stop()
    assert seen.events == ["join:e1", "leave:e1", "join:e2", "serving:e2"]
    assert (fake.lists, fake.watches) == (2, 1)  # the stopped run never watched


def test_stop_from_a_callback_ends_the_watch(
    api: tuple[FakeApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    fake, server = api
    fake.set_engines(member("e1", "joining"))
    roster = EngineRoster(NAME, NAMESPACE, api_server=server)
    threads: list[threading.Thread] = []

    def stop_on_join(_: Engine) -> None:
        threads.append(threading.current_thread())
        roster.stop()  # must not try to join its own thread

    roster._callbacks["join"] = stop_on_join
    roster.start()
    wait_for(lambda: threads and not threads[0].is_alive(), TIMEOUT, "the watch thread to end")
    assert (fake.lists, fake.watches) == (1, 0)
    assert "callback failed" not in caplog.text
