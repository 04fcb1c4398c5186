"""The dashboard: its JSON API over real run directories, path safety, and the page in chromium."""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from helpers import read_line

from ember_np import DqnConfig, EpisodeRecord, EpisodeStatus, TrainingRun
from ember_np.cli import main
from ember_np.dashboard import make_server
from ember_np.dashboard.logs import SMOOTH_EPISODES, JsonlTail, RunStore, TrainLog
from ember_np.stats import iqm, iqm_curve

STEPS = 3_000
CHROMIUM = "/usr/bin/chromium"


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_root(tmp_path_factory):
    """A runs root holding one run written by a real short training (native CartPole)."""
    root = tmp_path_factory.mktemp("runs")
    code = main(
        ["train", "ember_np/CartPole-v1", "--preset", "ember", "--steps", str(STEPS),
         "--eval-every", "1000", "--eval-episodes", "2", "--checkpoint-freq", "1000",
         "--root", str(root), "--name", "CartPole-v1", "--quiet", "--set", "min_replay_size=200", "hidden_sizes=[32]"]
    )  # fmt: skip
    assert code == 0
    return root


@pytest.fixture
def root(trained_root, tmp_path):
    """A private copy of the trained root (tests append to its logs)."""
    dst = tmp_path / "runs"
    shutil.copytree(trained_root, dst)
    return dst


def only_run_dir(root: Path) -> Path:
    (run_dir,) = (root / "CartPole-v1" / "ember").iterdir()
    return run_dir


def run_id_of(run_dir: Path) -> str:
    return f"CartPole-v1/ember/{run_dir.name}"


class Served:
    """A dashboard server on a free loopback port, in a thread."""

    def __init__(self, root: Path, **kwargs) -> None:
        self.server = make_server(root, port=0, **kwargs)
        self.host, self.port = self.server.server_address[:2]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return self.server.url

    def get(self, path: str, host: str | None = None, method: str = "GET"):
        """``method path`` exactly as given (no client-side normalisation of ``..``).

        ``host`` replaces the Host header (default: the server's own address).
        Returns the status and the body.
        """
        status, _, body = self.request(path, host, method)
        return status, body

    def request(self, path: str, host: str | None = None, method: str = "GET", timeout=10):
        """Like :meth:`get`, also returning the response headers."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            if host is None:
                conn.request(method, path)
            else:
                conn.putrequest(method, path, skip_host=True)
                conn.putheader("Host", host)
                conn.endheaders()
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read()
        finally:
            conn.close()

    def json(self, path: str):
        status, body = self.get(path)
        assert status == 200, (path, status, body[:200])
        return json.loads(body)

    def series(self, run_id: str, cursor: str | None = None):
        from urllib.parse import quote

        path = "/api/series?run=" + quote(run_id, safe="")
        if cursor is not None:
            path += "&cursor=" + quote(cursor, safe="")
        return self.json(path)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served(root):
    s = Served(root)
    yield s
    s.close()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def naive_eval_means(rows: list[dict]) -> tuple[list[int], list[float]]:
    by_step: dict[int, list[float]] = {}
    for r in rows:
        by_step.setdefault(r["total_steps_at_eval"], []).append(r["total_reward"])
    steps = sorted(by_step)
    return steps, [float(np.mean(by_step[s])) for s in steps]


def naive_moving_mean(values, window):
    return [float(np.mean(values[max(0, i + 1 - window) : i + 1])) for i in range(len(values))]


def append_episodes(run_dir: Path, rewards, start_steps: int, start_episode: int) -> None:
    run = TrainingRun.resume(run_dir)
    steps = start_steps
    for k, reward in enumerate(rewards):
        steps += 10
        record = EpisodeRecord(reward, 10, EpisodeStatus.TERMINATED, {"epsilon": 0.5, "loss": 0.25})
        run.log_train_episode(record, start_episode + k, steps)


# -- the API against a real run ------------------------------------------------------


def test_api_lists_the_run_and_serves_its_logs(served, root):
    run_dir = only_run_dir(root)
    meta = json.loads((run_dir / "metadata.json").read_text())
    train = read_jsonl(run_dir / "train_episodes.jsonl")
    evals = read_jsonl(run_dir / "eval_episodes.jsonl")
    (run_dir / ".lock").unlink()  # as a run written before runs were locked: the mtime rule
    listing = served.json("/api/runs")
    assert listing["root"] == str(root.resolve())
    (run,) = listing["runs"]
    assert run["id"] == run_id_of(run_dir)
    assert (run["name"], run["version"], run["run_id"]) == ("CartPole-v1", "ember", run_dir.name)
    assert run["seeds"] is None
    assert run["total_steps"] == meta["total_steps"] == STEPS
    assert run["episodes"] == len(train) == meta["total_episodes"]
    assert run["best_eval"] == pytest.approx(meta["best_eval_reward"])
    assert run["training"] is True  # written seconds ago, no lock file: the mtime rule
    series = served.series(run["id"])
    (member,) = series["members"]
    assert series["iqm"] is None and member["seed"] is None
    t = member["train"]
    assert t["steps"] == [r["total_steps"] for r in train]
    assert t["reward"] == [r["total_reward"] for r in train]
    assert t["length"] == [r["length"] for r in train]
    # epsilon and loss come from the training itself (the trainer's extras)
    config = DqnConfig.from_dict(json.loads((run_dir / "config.json").read_text())["dqn"])
    assert t["epsilon"] == [config.epsilon_at(r["total_steps"]) for r in train]
    assert t["loss"] == [r["extras"].get("loss") for r in train]
    assert t["loss"][0] is None and t["loss"][-1] > 0  # no loss before min_replay_size
    steps, means = naive_eval_means(evals)
    assert member["eval"]["steps"] == steps == [1000, 2000, 3000]
    assert member["eval"]["reward"] == pytest.approx(means)
    # the CLI's periodic eval at 3,000 and its final one: 4 episodes at that step
    assert member["eval"]["episodes"] == [2, 2, 4]


def test_half_written_and_malformed_lines(served, root):
    run_dir = only_run_dir(root)
    log = run_dir / "train_episodes.jsonl"
    run_id = run_id_of(run_dir)
    n = len(served.series(run_id)["members"][0]["train"]["steps"])
    line = json.dumps({"total_reward": 77.0, "length": 7, "status": "TERMINATED",
                       "extras": {}, "episode": n, "total_steps": STEPS + 7})  # fmt: skip
    with open(log, "a") as f:  # a writer caught mid-line
        f.write(line[:20])
    t = served.series(run_id)["members"][0]["train"]
    assert len(t["steps"]) == n  # the torn line is not read yet
    with open(log, "a") as f:
        f.write(line[20:] + "\n")
        f.write("not json at all\n")
        f.write("[1, 2, 3]\n")
        f.write('{"total_reward": "high", "length": 3}\n')
        f.write('{"total_reward": 1.0, "length": Infinity, "total_steps": -Infinity}\n')
        f.write('{"total_reward": true, "length": 2}\n')
        f.write('{"total_reward": NaN, "length": 5, "total_steps": 3012}\n')
        f.write("\n")
    t = served.series(run_id)["members"][0]["train"]
    assert t["steps"][n:] == [STEPS + 7, 3012]
    assert t["reward"][n:] == [77.0, None]  # a NaN reward is kept as a gap, not sent as NaN
    assert served.json("/api/runs")["runs"][0]["total_steps"] == 3012
    with open(log, "a") as f:  # a last line whose numbers are not finite
        f.write('{"total_reward": 2.0, "length": 1e999, "total_steps": Infinity, "episode": NaN}\n')
    (run,) = served.json("/api/runs")["runs"]
    assert (run["total_steps"], run["episodes"]) == (STEPS, n)  # metadata's, then
    assert served.series(run_id)["members"][0]["train"]["steps"][n:] == [STEPS + 7, 3012]
    with open(run_dir / "eval_episodes.jsonl", "a") as f:
        f.write('{"total_reward": 1.0}\n{"total_steps_at_eval": 9, "total_reward": null}\n{"tot')
    assert served.series(run_id)["members"][0]["eval"]["steps"] == [1000, 2000, 3000]
    (run_dir / "metadata.json").write_text("{ half")  # a reader never sees this (atomic writes)
    assert served.json("/api/runs")["runs"][0]["best_eval"] is not None  # last good metadata


def test_reads_only_the_appended_part_and_rereads_a_replaced_file(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"a": 1}\n{"a": 2}\n{"a"')
    tail = JsonlTail(log)
    tail.refresh()
    assert [r["a"] for r in tail.rows] == [1, 2]
    assert tail.offset == len('{"a": 1}\n{"a": 2}\n')
    # Overwrite the bytes already read in place (same inode, same size): a reader
    # that re-read the file would see the change; an incremental one must not.
    with open(log, "r+b") as f:
        f.write(b'{"a": 8}\n{"a": 9}\n')
    with open(log, "a") as f:
        f.write(': 3}\n{"a": 4}\n')
    tail.refresh()
    assert [r["a"] for r in tail.rows] == [1, 2, 3, 4] and tail.generation == 0
    # lines that only parse together, or that hold two objects, are each skipped
    with open(log, "a") as f:
        f.write('{"a": 5},{"a": 6}\n{"a": [7,\n8]}\n{"a": 9}\n')
    tail.refresh()
    assert [r["a"] for r in tail.rows] == [1, 2, 3, 4, 9] and tail.skipped == 3
    replacement = tmp_path / "new.jsonl"
    replacement.write_text('{"a": 5}\n')
    os.replace(replacement, log)  # what TrainingRun.rewind_logs does
    tail.refresh()
    assert [r["a"] for r in tail.rows] == [5] and tail.generation == 1
    log.unlink()
    tail.refresh()
    assert tail.rows == [] and tail.generation == 2


def naive_train_columns(rows):
    """The training columns, written for clarity (the reference for TrainColumns)."""

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def finite(v):
        return float(v) if number(v) and np.isfinite(v) else None

    def count(v):  # a whole number a browser reads exactly
        return int(v) if finite(v) is not None and abs(v) <= 2**53 else None

    out = {k: [] for k in ("steps", "reward", "length", "epsilon", "loss")}
    total = 0
    for row in rows:
        if not (number(row.get("total_reward")) and count(row.get("length")) is not None):
            continue
        total += int(row["length"])
        steps = count(row.get("total_steps"))
        out["steps"].append(steps if steps is not None else total)
        out["reward"].append(finite(row["total_reward"]))
        out["length"].append(int(row["length"]))
        extras = row.get("extras") if isinstance(row.get("extras"), dict) else {}
        out["epsilon"].append(finite(extras.get("epsilon")))
        out["loss"].append(finite(extras.get("loss")))
    return out


def test_train_columns_match_a_plain_reference(tmp_path):
    odd = [1, 2.5, -3, float("inf"), float("-inf"), float("nan"), True, False, None, "7", [1], {}]
    rng = np.random.default_rng(6)
    rows = []
    for k in range(400):
        pick = rng.integers(len(odd), size=5)
        row = {"total_reward": odd[pick[0]] if k % 3 == 0 else float(k),
               "length": odd[pick[1]] if k % 5 == 0 else 10,
               "total_steps": odd[pick[2]] if k % 7 == 0 else 10 * k}  # fmt: skip
        if k % 11:
            row["extras"] = {"epsilon": odd[pick[3]], "loss": odd[pick[4]]}
        elif k % 2:
            row["extras"] = odd[pick[3]]
        rows.append(row)
    log = tmp_path / "train_episodes.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = TrainLog(log)
    cols.refresh()
    got = cols.to_dict()
    assert got.pop("from") == 0
    want = naive_train_columns(rows)
    assert got == want
    assert len(want["steps"]) > 250 and None in want["reward"] and None in want["epsilon"]


def test_rewound_logs_show_up_shorter(served, root):
    run_dir = only_run_dir(root)
    run_id = run_id_of(run_dir)
    assert served.series(run_id)["members"][0]["train"]["steps"][-1] > 1500
    kept = TrainingRun.resume(run_dir).rewind_logs(1500)
    t = served.series(run_id)["members"][0]["train"]
    assert len(t["steps"]) == kept and t["steps"][-1] <= 1500
    assert served.series(run_id)["members"][0]["eval"]["steps"] == [1000]


WRITER = textwrap.dedent(
    """
    import fcntl, json, sys, time
    run_dir, n = sys.argv[1], int(sys.argv[2])
    lock = open(run_dir + "/run.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    print("locked", flush=True)
    log = open(run_dir + "/train_episodes.jsonl", "a")
    for k in range(n):
        line = json.dumps({"total_reward": 1000.0 + k, "length": 1, "total_steps": 10**6 + k})
        log.write(line[:9]); log.flush(); time.sleep(0.002)   # a torn line, for a moment
        log.write(line[9:] + "\\n"); log.flush(); time.sleep(0.002)
    sys.stdin.readline()  # hold the lock until told to stop
    """
)


def test_a_run_written_by_another_process(served, root):
    run_dir = only_run_dir(root)
    run_id = run_id_of(run_dir)
    base = served.series(run_id)["members"][0]["train"]
    n0, n = len(base["steps"]), 300
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run_dir), str(n)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert read_line(writer).strip() == "locked"
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = served.series(run_id)["members"][0]["train"]["reward"]
            seen.append(len(rows))
            assert rows[:n0] == base["reward"]
            assert rows[n0:] == [1000.0 + k for k in range(len(rows) - n0)]  # whole rows only
            if len(rows) == n0 + n:
                break
        assert seen[-1] == n0 + n and seen == sorted(seen)
        if os.path.exists("/proc/locks"):
            assert served.json("/api/runs")["runs"][0]["training"] is True
    finally:
        writer.communicate("stop\n", timeout=10)
    if os.path.exists("/proc/locks"):
        # The lock file is still there but nobody holds it: the run has stopped,
        # however recent its last write.
        assert served.json("/api/runs")["runs"][0]["training"] is False


def test_lock_rule_holds_and_releases(served, root):
    run_dir = only_run_dir(root)
    if not os.path.exists("/proc/locks"):
        pytest.skip("no /proc/locks here: the dashboard falls back to the mtime rule")
    lock_path = run_dir / ".lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert served.json("/api/runs")["runs"][0]["training"] is True
        fcntl.flock(lock, fcntl.LOCK_UN)
        assert served.json("/api/runs")["runs"][0]["training"] is False


# -- path safety ---------------------------------------------------------------------


def test_requests_outside_the_root_are_refused(served, root, tmp_path):
    run_dir = only_run_dir(root)
    outside = tmp_path / "outside"
    shutil.copytree(run_dir, outside / "n" / "v" / "20260101_000000")
    # a symlinked run directory and a symlinked name directory, both leading out
    os.symlink(outside / "n" / "v" / "20260101_000000", run_dir.parent / "20260101_000001")
    os.symlink(outside / "n", root / "escape")
    # a log inside a real run that links out of the root
    inside = root / "n2" / "v" / "20260101_000002"
    inside.mkdir(parents=True)
    shutil.copy(run_dir / "metadata.json", inside / "metadata.json")
    os.symlink(outside / "n" / "v" / "20260101_000000" / "train_episodes.jsonl",
               inside / "train_episodes.jsonl")  # fmt: skip
    ids = {r["id"] for r in served.json("/api/runs")["runs"]}
    assert ids == {run_id_of(run_dir), "n2/v/20260101_000002"}
    assert served.series("n2/v/20260101_000002")["members"][0]["train"]["steps"] == []
    refused = [
        "/api/series?run=CartPole-v1/ember/20260101_000001",
        "/api/series?run=escape/v/20260101_000000",
        "/api/series?run=../outside/n/v/20260101_000000",
        "/api/series?run=CartPole-v1/ember/..%2F..%2F..%2F..%2Foutside%2Fn%2Fv%2F20260101_000000",
        "/api/series?run=" + str(outside / "n" / "v" / "20260101_000000"),
        "/api/series?run=%2Fetc%2Fpasswd",
        "/api/series?run=CartPole-v1/ember",
        "/api/series?run=CartPole-v1/ember/" + run_dir.name + "/..",
        "/api/series",
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/app.js/../server.py",
        "/static/app.js",
        "/logs.py",
        "/api/runs/../../etc/passwd",
        "//etc/passwd",
    ]
    for path in refused:
        status, body = served.get(path)
        assert status == 404, path
        assert b"passwd" not in body or b"not found" in body
        assert b"total_reward" not in body


# -- the Host header (DNS rebinding) and methods ---------------------------------------

EVERY_PATH = ["/", "/index.html", "/app.js", "/style.css", "/api/runs", "/api/series",
              "/api/series?run=x", "/nope", "/../../etc/passwd"]  # fmt: skip


def test_a_foreign_host_header_is_refused_on_every_path(served, root):
    """A DNS-rebinding page (evil.example resolving to 127.0.0.1) reads nothing."""
    run_id = run_id_of(only_run_dir(root))
    paths = EVERY_PATH + ["/api/series?run=" + run_id]
    port = served.port
    foreign = ["evil.example", f"evil.example:{port}", "127.0.0.1.evil.example",
               f"localhost.evil.example:{port}", "", "[::1", "127.0.0.1:80:80"]  # fmt: skip
    for host in foreign:
        for path in paths:
            for method in ("GET", "HEAD"):
                status, body = served.get(path, host=host, method=method)
                assert status == 403, (host, path, method)
                assert str(root.resolve()).encode() not in body and b"total_reward" not in body
        status, body = served.get("/api/runs", host=host, method="POST")
        assert status == 403, host
    status, body = served.get("/api/runs", host="evil.example")
    assert b"--allow-host" in body  # the refusal says how to allow a name


def test_loopback_host_headers_are_served(served, root):
    port = served.port
    for host in [
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        "localhost",
        "LocalHost:8080",
        "localhost.:8080",
        "127.0.0.1",
    ]:  # fmt: skip  (8080: an ssh -L tunnel's port)
        listing = json.loads(served.get("/api/runs", host=host)[1])
        assert listing["root"] == str(root.resolve()), host
        assert served.get("/", host=host)[0] == 200, host


def test_allow_host_adds_names(root):
    served = Served(root, allow_hosts=["dash.example", "192.168.1.5", "fe80::1"])
    try:
        for host in ["dash.example", "Dash.Example:443", "192.168.1.5:6006", "[fe80::1]:80",
                     f"localhost:{served.port}"]:  # fmt: skip
            assert served.get("/api/runs", host=host)[0] == 200, host
        for host in ["evil.example", "dash.example.evil", "192.168.1.6", "x.dash.example"]:
            assert served.get("/api/runs", host=host)[0] == 403, host
    finally:
        served.close()
    for bad in ["http://dash.example", "dash.example/x", "dash.example:80", "", "a b", "[::1]:1"]:
        with pytest.raises(ValueError, match="allow_hosts"):
            make_server(root, port=0, allow_hosts=[bad])


def test_cli_allow_host(root, capsys):
    proc = subprocess.Popen(
        [sys.executable, "-m", "ember_np", "dashboard", str(root), "--port", "0",
         "--allow-host", "dash.example", "--allow-host", "other.example"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = read_line(proc).split()[2]
        host, port = url.removeprefix("http://").rstrip("/").split(":")
        for name, want in [("dash.example", 200), ("other.example:9", 200), ("evil.example", 403)]:
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.putrequest("GET", "/api/runs", skip_host=True)
            conn.putheader("Host", name)
            conn.endheaders()
            assert conn.getresponse().status == want, name
            conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert main(["dashboard", str(root), "--port", "0", "--allow-host", "http://x/"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-host" in err and "'http://x/'" in err


def ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_serves_on_ipv6_loopback(root):
    if not ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback (binding a socket on ::1 failed)")
    served = Served(root, host="::1")
    try:
        assert served.url == f"http://[::1]:{served.port}/"
        listing = json.loads(served.get("/api/runs", host=f"[::1]:{served.port}")[1])
        assert [r["id"] for r in listing["runs"]] == [run_id_of(only_run_dir(root))]
        assert served.get("/api/runs", host=f"localhost:{served.port}")[0] == 200
        assert served.get("/api/runs", host="evil.example")[0] == 403
    finally:
        served.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ember_np", "dashboard", str(root), "--port", "0", "--host", "::1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = read_line(proc)
        assert line.startswith("ember-np dashboard: http://[::1]:"), (line, proc.stderr.read())
        port = int(line.split()[2].rstrip("/").rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("::1", port, timeout=10)
        conn.request("GET", "/api/runs")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_other_methods_get_405_with_allow(served):
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO"):
        for path in ("/", "/api/runs", "/nope"):
            status, headers, body = served.request(path, method=method)
            assert status == 405, (method, path)
            assert headers["Allow"] == "GET, HEAD"
            assert json.loads(body) == {"error": f"method {method} not allowed: GET or HEAD only"}
    status, headers, body = served.request("/api/runs", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


def test_root_must_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="runs root .* is not a directory"):
        RunStore(tmp_path / "missing")


# -- multi-seed runs -----------------------------------------------------------------


def make_multi_seed(root: Path, rewards_by_seed: dict[int, list[float]], evals) -> str:
    """``root/multi/v1/<run_id>/seed_<s>/``: ordinary runs with the given episodes."""
    group = root / "multi" / "v1" / "20260102_000000"
    for seed, rewards in rewards_by_seed.items():
        d = group / f"seed_{seed}"
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = TrainingRun.create("tmp", "v", root=root / ".staging")
        tmp.dir.rename(d)
        run = TrainingRun.resume(d)
        steps = 0
        for k, r in enumerate(rewards):
            steps += 10 + seed  # seeds end their episodes at different steps
            run.log_train_episode(EpisodeRecord(r, 10 + seed), k, steps)
        for step, reward in evals[seed]:
            run.log_eval_episode(EpisodeRecord(reward, 10), step)
        run.update_metadata(steps, len(rewards), best_eval_reward=max(r for _, r in evals[seed]))
    shutil.rmtree(root / ".staging")
    return "multi/v1/20260102_000000"


def test_multi_seed_run_has_an_iqm_curve_with_a_band(tmp_path):
    rng = np.random.default_rng(5)
    rewards = {s: list(rng.integers(0, 500, size=60).astype(float)) for s in range(4)}
    evals = {s: [(200, 10.0 * s), (400, 100.0 + s), (600 + s, 1.0)] for s in range(4)}
    run_id = make_multi_seed(tmp_path, rewards, evals)
    served = Served(tmp_path)
    try:
        (run,) = served.json("/api/runs")["runs"]
        assert run["id"] == run_id and run["seeds"] == [0, 1, 2, 3]
        assert run["total_steps"] == 60 * 10  # every seed has reached it
        assert run["best_eval"] == 103.0
        series = served.series(run_id)
    finally:
        served.close()
    assert [m["seed"] for m in series["members"]] == [0, 1, 2, 3]
    curve = series["iqm"]["train"]
    steps = np.array(curve["steps"])
    assert steps[0] == 13 and steps[-1] == 600  # from the last first episode to the first last
    for x, mid, lo, hi in list(zip(steps, curve["iqm"], curve["lo"], curve["hi"]))[::17]:
        at = []
        for s in range(4):
            ends = np.cumsum(np.full(60, 10 + s))
            smoothed = naive_moving_mean(rewards[s], SMOOTH_EPISODES)
            at.append(smoothed[np.searchsorted(ends, x, side="right") - 1])
        assert mid == pytest.approx(iqm(at))
        assert lo <= mid <= hi
    ev = series["iqm"]["eval"]
    assert ev["steps"] == [200, 400]  # 600+s is not a step every seed was evaluated at
    assert ev["iqm"] == pytest.approx([iqm([0, 10, 20, 30]), iqm([100, 101, 102, 103])])
    # the band is ember_np.stats' bootstrap over seeds (seeded: stable between refreshes)
    band = iqm_curve([[0, 100], [10, 101], [20, 102], [30, 103]], reps=1_000)
    assert ev["lo"] == pytest.approx(band.low) and ev["hi"] == pytest.approx(band.high)
    assert all(lo < hi for lo, hi in zip(ev["lo"], ev["hi"]))


def test_a_series_has_the_seeds_written_since_the_last_listing(tmp_path):
    # the page lists runs every 2 s and fetches a series when a run is ticked: a seed that
    # appeared in between must be in the series and its IQM (it once plotted seed 0 alone)
    rewards = {s: [float(10 * s + k) for k in range(30)] for s in range(3)}
    run_id = make_multi_seed(tmp_path, {0: rewards[0]}, {0: [(100, 1.0)]})
    store = RunStore(tmp_path)
    (listed,) = store.list_runs()
    assert listed["seeds"] == [0]
    make_multi_seed(tmp_path, {s: rewards[s] for s in (1, 2)}, {s: [(100, 1.0)] for s in (1, 2)})
    page = store.series(run_id)
    assert [m["seed"] for m in page["members"]] == [0, 1, 2]
    assert page["iqm"] == RunStore(tmp_path).series(run_id)["iqm"]  # a store that never listed
    assert page["iqm"]["train"]["steps"][0] == 12  # seed 2's first episode, not seed 0's
    assert [r["seeds"] for r in store.list_runs()] == [[0, 1, 2]]


# -- hostile numbers, big logs: finite JSON, pages after a cursor, no global lock ---------


def strict_json(body: bytes):
    """``body`` parsed as a browser would, failing on NaN, Infinity or a number beyond float64."""

    def number(text):
        value = float(text)
        assert np.isfinite(value), f"a number a browser reads as infinite: {text[:20]}..."
        return value

    def constant(name):
        raise AssertionError(f"non-finite number sent: {name}")

    return json.loads(body, parse_int=number, parse_float=number, parse_constant=constant)


def test_extreme_numbers_are_sent_as_finite_json(tmp_path):
    """1e308 twice at one step (a sum overflows), 1e400 and 10**400 anywhere: strict, finite JSON."""
    big = 10**400  # a JSON integer Python reads exactly, beyond float64
    run = TrainingRun.create("foreign", "v", root=tmp_path)
    meta = json.loads((run.dir / "metadata.json").read_text())
    meta.update(total_steps=big, total_episodes=1e308, best_eval_reward=big)
    (run.dir / "metadata.json").write_text(json.dumps(meta))
    train = [
        {"total_reward": 1e308, "length": 10, "total_steps": 10,
         "extras": {"epsilon": 1e308, "loss": -1e308}},
        {"total_reward": 1e308, "length": 10, "total_steps": 20, "extras": {"loss": big}},
        {"total_reward": big, "length": 10, "total_steps": big},  # reward missing; steps: 10+10+10
        {"total_reward": -1e308, "length": 2**60, "total_steps": 40},  # no count length: skipped
        {"total_reward": 5.0, "length": 1e308, "total_steps": 50},  # skipped
        {"total_reward": -1e308, "length": 10, "total_steps": 1e300, "episode": big},  # > 2**53
    ]  # fmt: skip
    evals = [(100, 1e308), (100, 1e308), (200, -1e308), (200, 1e308), (200, 1e308),
             (big, 1.0), (300, big), (300, 1.5)]  # fmt: skip
    (run.dir / "train_episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (run.dir / "eval_episodes.jsonl").write_text("".join(
        json.dumps({"total_reward": r, "length": 1, "total_steps_at_eval": s}) + "\n"
        for s, r in evals))  # fmt: skip
    rng = np.random.default_rng(3)
    multi = make_multi_seed(
        tmp_path, {s: list(rng.choice([1e308, -1e308, 1.7e308], size=30)) for s in range(3)},
        {s: [(100, 1e308), (200, -1.7e308)] for s in range(3)},
    )  # fmt: skip
    served = Served(tmp_path)
    try:
        status, body = served.get("/api/runs")
        assert status == 200, body
        runs = {r["id"]: r for r in strict_json(body)["runs"]}
        foreign = runs["foreign/v/" + run.dir.name]
        assert foreign["best_eval"] == 1e308  # metadata's 10**400 is no number; the evals' best
        assert (foreign["total_steps"], foreign["episodes"]) == (0, 0)  # none readable
        pages = {}
        for rid in runs:
            status, body = served.get("/api/series?run=" + rid)
            assert status == 200, body
            pages[rid] = strict_json(body)
    finally:
        served.close()
    (member,) = pages["foreign/v/" + run.dir.name]["members"]
    t = member["train"]
    assert t["steps"] == [10, 20, 30, 40]  # steps beyond 2**53: the running sum of lengths
    assert t["reward"] == [1e308, 1e308, None, -1e308]
    assert (t["epsilon"], t["loss"]) == ([1e308, None, None, None], [-1e308, None, None, None])
    e = member["eval"]
    assert (e["steps"], e["episodes"]) == ([100, 200, 300], [2, 3, 1])
    assert e["reward"][:2] == [1e308, pytest.approx(1e308 / 3)] and e["reward"][2] == 1.5
    iqm_train = pages[multi]["iqm"]["train"]
    assert iqm_train is not None and len(iqm_train["iqm"]) > 100  # no overflow, no gap
    assert all(lo <= m <= hi for lo, m, hi in zip(iqm_train["lo"], iqm_train["iqm"],
                                                  iqm_train["hi"]))  # fmt: skip
    assert pages[multi]["iqm"]["eval"]["iqm"] == [pytest.approx(1e308), pytest.approx(-1.7e308)]


def test_a_series_page_holds_only_what_was_appended_after_its_cursor(served, root):
    run_dir = only_run_dir(root)
    run_id = run_id_of(run_dir)
    train = read_jsonl(run_dir / "train_episodes.jsonl")
    n = len(train)
    first = served.series(run_id)
    assert first["more"] is False and first["multi_seed"] is False
    (m,) = first["members"]
    assert m["train"]["from"] == 0 and len(m["train"]["steps"]) == n
    assert m["eval"]["from"] == 0 and m["eval"]["steps"] == [1000, 2000, 3000]
    same = served.series(run_id, first["cursor"])["members"][0]
    assert same["train"] == {"from": n, "steps": [], "reward": [], "length": [], "epsilon": [],
                             "loss": []}  # fmt: skip
    assert (same["eval"]["from"], same["eval"]["steps"]) == (3, [])
    append_episodes(run_dir, [400.0, 401.0, 402.0], train[-1]["total_steps"], n)
    TrainingRun.resume(run_dir).log_eval_episode(EpisodeRecord(7.0, 10), 3000)
    page = served.series(run_id, first["cursor"])
    (m,) = page["members"]
    assert m["train"]["from"] == n and m["train"]["reward"] == [400.0, 401.0, 402.0]
    assert m["train"]["steps"] == [train[-1]["total_steps"] + 10 * k for k in (1, 2, 3)]
    # the step-3000 point changed: it is sent again, with its new mean, in its place
    assert (m["eval"]["from"], m["eval"]["steps"], m["eval"]["episodes"]) == (2, [3000], [5])
    assert served.series(run_id, page["cursor"])["members"][0]["train"]["from"] == n + 3
    # a rewound log (a new file): the old cursor points into another file, so from 0
    kept = TrainingRun.resume(run_dir).rewind_logs(1500)
    again = served.series(run_id, page["cursor"])["members"][0]
    assert again["train"]["from"] == 0 and len(again["train"]["steps"]) == kept
    assert (again["eval"]["from"], again["eval"]["steps"]) == (0, [1000])
    for junk in ["", "x", "[]", '{"-": [1, 2]}', '{"-": [1, 2, 3, -4]}', '{"-": "1,2,3,4"}',
                 '{"-": [1e3, 2, 3, 4]}', "{" * 5000]:  # fmt: skip
        status, body = served.get(
            "/api/series?run=" + run_id + "&cursor=" + urllib.parse.quote(junk, safe="")
        )
        assert status == 200 and json.loads(body)["members"][0]["train"]["from"] == 0, junk


def test_series_pages_are_bounded_and_a_log_is_parsed_once(root, monkeypatch):
    from ember_np.dashboard import logs, tails

    page_bytes = 2048
    monkeypatch.setattr(tails, "PAGE_BYTES", page_bytes)
    run_dir = only_run_dir(root)
    run_id = run_id_of(run_dir)
    log = run_dir / "train_episodes.jsonl"
    with open(log, "a") as f:  # a line longer than a page: skipped, never held whole
        f.write('{"total_reward": 1.0, "length": 1, "pad": "' + "x" * 3 * page_bytes + '"}\n')
    append_episodes(run_dir, [500.0], 10**6, 10**6)
    want = naive_train_columns(read_jsonl(log)[:-2] + read_jsonl(log)[-1:])
    parsed = []
    parse = logs.JsonlTail.parse_lines

    def counting_parse(self, lines, ends):
        if self.path == log:
            parsed.extend(lines)
        return parse(self, lines, ends)

    monkeypatch.setattr(logs.JsonlTail, "parse_lines", counting_parse)
    served = Served(root)
    try:
        got = {k: [] for k in want}
        cursor, pages, more = None, 0, True
        while more:
            page = served.series(run_id, cursor)
            t = page["members"][0]["train"]
            assert t["from"] == len(got["steps"])
            rows = len(t["steps"])
            assert rows <= page_bytes // 100 + 1  # a log row is > 100 bytes
            assert (page["iqm"], page["more"]) == (None, page["more"])
            for k in want:
                got[k] += t[k]
            cursor, more = page["cursor"], page["more"]
            pages += 1
        assert got == want
        assert pages >= (log.stat().st_size - 3 * page_bytes) // page_bytes
        lines = len(parsed)
        again = served.series(run_id)  # another client, from the start: nothing parsed again
        assert (
            again["members"][0]["train"]["steps"]
            == want["steps"][: len(again["members"][0]["train"]["steps"])]
        )
        assert len(parsed) == lines == len(log.read_bytes().splitlines()) - 1
    finally:
        served.close()


def test_listing_runs_is_not_blocked_while_a_log_is_parsed(served, root, monkeypatch):
    from ember_np.dashboard import logs

    run_id = run_id_of(only_run_dir(root))
    entered, release = threading.Event(), threading.Event()
    parse = logs.JsonlTail.parse_lines

    def slow_parse(self, *args):
        if self.path.name == "train_episodes.jsonl":
            entered.set()
            release.wait(30)
        return parse(self, *args)

    monkeypatch.setattr(logs.JsonlTail, "parse_lines", slow_parse)
    answers = []
    reader = threading.Thread(target=lambda: answers.append(served.series(run_id)))
    reader.start()
    try:
        assert entered.wait(10)  # the series request is parsing the training log now
        status, _, body = served.request("/api/runs", timeout=5)
        assert status == 200 and [r["id"] for r in json.loads(body)["runs"]] == [run_id]
    finally:
        release.set()
        reader.join(30)
    assert len(answers) == 1 and len(answers[0]["members"][0]["train"]["steps"]) > 10


# -- the command line and the installed package ---------------------------------------


def test_cli_prints_one_line_and_serves(root):
    proc = subprocess.Popen(
        [sys.executable, "-m", "ember_np", "dashboard", str(root), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = read_line(proc)
        assert line.startswith("ember-np dashboard: http://127.0.0.1:")
        url = line.split()[2]
        host, port = url.removeprefix("http://").rstrip("/").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/api/runs")
        runs = json.loads(conn.getresponse().read())["runs"]
        assert [r["id"] for r in runs] == [run_id_of(only_run_dir(root))]
        conn.request("GET", "/")
        page = conn.getresponse().read()
        assert b'<script src="app.js">' in page
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_cli_bad_arguments(tmp_path, capsys):
    assert main(["dashboard", str(tmp_path / "nope"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "is not a directory" in err and "--root" in err
    assert main(["dashboard", str(tmp_path), "--port", "70000"]) == 2
    assert "--port must be 0..65535" in capsys.readouterr().err


def test_static_files_ship_in_a_non_editable_build(tmp_path):
    """setuptools' build step (what a wheel holds) copies the page along with the code."""
    repo = Path(__file__).resolve().parent.parent
    src = tmp_path / "src"
    shutil.copytree(repo / "ember_np", src / "ember_np",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, src / name)
    lib = tmp_path / "lib"
    subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
         "--build-lib", str(lib)],
        cwd=src, check=True, capture_output=True,
    )  # fmt: skip
    for f in ("index.html", "app.js", "style.css"):
        assert (lib / "ember_np" / "dashboard" / "static" / f).is_file(), f
    probe = (  # the installed server answers with the page's files
        "import http.client, threading; import ember_np.dashboard.server as s; "
        f"print(s.__file__); srv = s.make_server({str(tmp_path)!r}, port=0); "
        "threading.Thread(target=srv.serve_forever, daemon=True).start(); "
        "c = http.client.HTTPConnection(*srv.server_address[:2], timeout=30); sizes = []\n"
        "for path in ('/app.js', '/index.html'):\n"
        "    c.request('GET', path); r = c.getresponse(); assert r.status == 200, r.status\n"
        "    sizes.append(len(r.read()))\n"
        "print(*sizes); srv.shutdown()"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(lib)},
        cwd=tmp_path, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    assert out[0].startswith(str(lib))
    assert int(out[1]) > 1000 and int(out[2]) > 100


# -- the page in a real browser --------------------------------------------------------


def sync_playwright_or_skip():
    """Playwright and Debian's chromium; missing in CI is a failure, elsewhere a skip."""
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "the playwright package (pip install -e '.[test]')"
    if missing is None and not os.access(CHROMIUM, os.X_OK):
        missing = f"{CHROMIUM} (apt-get install chromium)"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test needs {missing}; .ci/run installs it")
        pytest.skip(f"needs {missing}")
    return sync_playwright


def test_page_plots_the_logs_and_follows_a_growing_run(served, root, tmp_path):
    sync_playwright = sync_playwright_or_skip()
    run_dir = only_run_dir(root)
    run_id = run_id_of(run_dir)
    train = read_jsonl(run_dir / "train_episodes.jsonl")
    evals = read_jsonl(run_dir / "eval_episodes.jsonl")
    n = len(train)
    from urllib.parse import quote

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh user data dir
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-first-run"],
            viewport={"width": 1400, "height": 900},
        )  # fmt: skip
        try:
            page = context.new_page()
            elsewhere = []  # any request not to our server (a CDN, a font...) fails the test
            origin = served.url.rstrip("/")

            def route(r):
                if r.request.url.startswith(origin):
                    r.continue_()
                else:
                    elsewhere.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            # polled every 0.2 s instead of 2 s: the test waits less for each change
            page.goto(served.url + "?refresh=0.2#runs=" + quote(run_id, safe=""))
            page.wait_for_function(
                "n => (window.__dashboard.plotted.reward || []).some("
                "t => t.kind === 'raw' && t.x.length === n)",
                arg=n, timeout=15_000,
            )  # fmt: skip
            plotted = page.evaluate("window.__dashboard.plotted")

            def trace(chart, kind):
                (t,) = [t for t in plotted[chart] if t["kind"] == kind and t["run"] == run_id]
                return t

            raw = trace("reward", "raw")
            assert raw["x"] == [r["total_steps"] for r in train]
            assert raw["y"] == [r["total_reward"] for r in train]
            smoothed = trace("reward", "smoothed")
            assert smoothed["y"] == pytest.approx(
                naive_moving_mean([r["total_reward"] for r in train], 20)
            )
            length = trace("length", "smoothed")
            assert length["y"] == pytest.approx(naive_moving_mean([r["length"] for r in train], 20))
            eps = trace("epsilon", "epsilon")
            assert eps["y"] == [r["extras"]["epsilon"] for r in train]
            loss = trace("loss", "loss")
            with_loss = [r for r in train if "loss" in r["extras"]]
            assert loss["x"] == [r["total_steps"] for r in with_loss]
            assert loss["y"] == [r["extras"]["loss"] for r in with_loss]
            # what is on screen: one path vertex per episode, eval dots carry their values
            vertices = page.evaluate(
                "document.querySelector('svg[data-chart=reward] path[data-kind=raw]')"
                ".getAttribute('d').split(/[ML]/).filter(Boolean).length"
            )
            assert vertices == n
            dots = page.evaluate(
                "[...document.querySelectorAll('svg[data-chart=eval] circle')]"
                ".map(c => [+c.dataset.x, +c.dataset.y])"
            )
            steps, means = naive_eval_means(evals)
            assert [d[0] for d in dots] == steps
            assert [d[1] for d in dots] == pytest.approx(means)

            # zoom by dragging across the reward chart
            box = page.locator("svg[data-chart=reward]").bounding_box()
            y = box["y"] + box["height"] / 2
            page.mouse.move(box["x"] + box["width"] * 0.3, y)
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=5)
            page.mouse.up()
            zoom = page.evaluate("window.__dashboard.state.zoom")
            assert zoom is not None and 0 < zoom[0] < zoom[1] < STEPS
            page.evaluate("window.__same_page = true")

            # the run grows: the page shows the new episodes by itself
            new = [400.0 + k for k in range(5)]
            append_episodes(run_dir, new, train[-1]["total_steps"], n)
            page.wait_for_function(
                "n => window.__dashboard.plotted.reward.some("
                "t => t.kind === 'raw' && t.x.length === n)",
                arg=n + 5, timeout=10_000,
            )  # fmt: skip
            plotted = page.evaluate("window.__dashboard.plotted")
            assert trace("reward", "raw")["y"][n:] == new
            assert page.evaluate("window.__same_page") is True  # no reload
            assert page.evaluate("window.__dashboard.state.zoom") == zoom  # zoom kept
            checked = page.locator(f"#runs li[data-run='{run_id}'] input").is_checked()
            assert checked  # selection kept

            # a multi-seed run appears in the list; ticked, it is overlaid as IQM + band
            rng = np.random.default_rng(7)
            rewards = {s: list(rng.integers(0, 200, size=40).astype(float)) for s in range(3)}
            multi = make_multi_seed(root, rewards, {s: [(100, 5.0 * s)] for s in range(3)})
            box = page.locator(f"#runs li[data-run='{multi}'] input")
            box.wait_for(timeout=10_000)
            box.check()
            page.wait_for_function(
                "id => window.__dashboard.plotted.reward.some(t => t.run === id && t.kind === 'iqm')",
                arg=multi, timeout=10_000,
            )  # fmt: skip
            plotted = page.evaluate("window.__dashboard.plotted")
            curve = served.series(multi)["iqm"]["train"]
            mine = {t["kind"]: t for t in plotted["reward"] if t["run"] == multi}
            assert (mine["iqm"]["x"], mine["iqm"]["y"]) == (curve["steps"], curve["iqm"])
            assert (mine["band"]["lo"], mine["band"]["hi"]) == (curve["lo"], curve["hi"])
            band = f"svg[data-chart=reward] path[data-kind=band][data-run='{multi}']"
            assert page.locator(band).count() == 1
            assert trace("reward", "raw")["y"][n:] == new  # the first run is still drawn
            assert {t["seed"] for t in plotted["length"] if t["run"] == multi} == {0, 1, 2}
            assert quote(multi, safe="") in page.evaluate("location.hash")
            page.locator("svg[data-chart=eval]").dblclick()
            assert page.evaluate("window.__dashboard.state.zoom") is None  # zoomed out
            assert not errors and not elsewhere
            shot = tmp_path / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        finally:
            context.close()


def test_page_keeps_refreshing_after_a_malformed_url_hash(served, root, tmp_path):
    """A hash that is not valid percent-encoding skips that id; the page still polls and plots."""
    sync_playwright = sync_playwright_or_skip()
    run_dir = only_run_dir(root)
    run_id = run_id_of(run_dir)
    n = len(read_jsonl(run_dir / "train_episodes.jsonl"))
    from urllib.parse import quote

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-first-run"],
        )  # fmt: skip
        try:
            for tail in ["#%E0%A4%A", "#runs=%E0%A4%A", f"#runs=%,{quote(run_id, safe='')},%E0%A4"]:
                page = context.new_page()
                errors = []
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.goto(served.url + "?refresh=0.2" + tail)
                assert page.evaluate("window.__dashboard.refreshMs") == 200
                page.wait_for_function("window.__dashboard.refreshes >= 2", timeout=15_000)
                # the valid id in the hash (or, with none, the newest run) is plotted
                page.wait_for_function(
                    "n => (window.__dashboard.plotted.reward || []).some("
                    "t => t.kind === 'raw' && t.x.length === n)",
                    arg=n, timeout=15_000,
                )  # fmt: skip
                assert not errors, (tail, errors)
                page.close()
            # ?refresh=SECONDS sets the polling period, clamped to 0.1..3600 s; 2 s without
            # one or with one that is not a number
            page = context.new_page()
            for query, period in [("", 2000), ("?refresh=abc", 2000), ("?refresh=", 2000),
                                  ("?refresh=0", 100), ("?refresh=5", 5000),
                                  ("?refresh=1e9", 3_600_000)]:  # fmt: skip
                page.goto(served.url + query)
                assert page.evaluate("window.__dashboard.refreshMs") == period, query
        finally:
            context.close()


def test_a_burst_of_connections_is_queued_not_dropped(root):
    """Bound but not yet accepting: 300 connections wait in the listen queue (backlog 5 drops them)."""
    import socket

    server = make_server(root, port=0)  # bound and listening; serve_forever not called
    try:
        conns = []
        for _ in range(300):
            conns.append(socket.create_connection(server.server_address[:2], timeout=3))
        assert len(conns) == 300
    finally:
        for c in conns:
            c.close()
        server.server_close()


def test_500_concurrent_requests_with_slowloris_connections_open(served):
    import socket
    from concurrent.futures import ThreadPoolExecutor

    slow = []
    try:
        for _ in range(100):  # headers that never end
            s = socket.create_connection((served.host, served.port), timeout=10)
            s.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            slow.append(s)
        with ThreadPoolExecutor(100) as pool:
            statuses = list(pool.map(lambda _: served.get("/api/runs")[0], range(500)))
        assert statuses == [200] * 500
    finally:
        for s in slow:
            s.close()
