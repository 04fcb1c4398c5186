"""The dashboard's API on a full runs root: 20 runs of 50,000 CartPole steps each.

Run with ``pytest bench -k dashboard``. The bar (issue 17): the run list and
one run's series are each served in under 200 ms. Timed over HTTP on
loopback, JSON encoding included:

- ``cold``: the first request of a fresh server, which reads every log whole;
- ``warm``: a refresh with a few episodes appended to each log since the
  last one (what the page's 2-second poll costs while runs train).

The big-log benchmarks (issue 23) write one run with a training log of
:data:`BIG_MB` MB and time: the first page of its series, every page of it
(what a fresh page fetches), a refresh after 100 appended episodes (only those
are sent), and ``/api/runs`` while another client pages through the big log on
a fresh server. ``extra_info`` holds the page count, response bytes and
tracemalloc's peak per page request.

Logs are synthesized in the trainer's row format. ``learning``: episode
length rises from ~20 to 500 over 30,000 steps (about 500 episodes per run);
``random``: a policy that never learns, ~22 steps an episode (about 2,300
episodes per run, the most 50,000 CartPole steps can hold in practice).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import tracemalloc
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from ember_np import TrainingRun
from ember_np.dashboard import make_server

RUNS = 20
STEPS = 50_000
SEEDS = 5  # the multi-seed run


def _lengths(kind: str, rng: np.random.Generator) -> list[int]:
    out, total = [], 0
    while total < STEPS:
        if kind == "learning":
            mean = 20 + 480 * min(total / 30_000, 1.0) ** 2
        else:
            mean = 22
        n = int(np.clip(rng.normal(mean, 0.2 * mean), 8, 500))
        n = min(n, STEPS - total)
        out.append(n)
        total += n
    return out


def _write_run(directory: Path, kind: str, seed: int) -> int:
    """Write one run's logs; returns its episode count."""
    rng = np.random.default_rng(seed)
    lines, total = [], 0
    for episode, n in enumerate(_lengths(kind, rng)):
        total += n
        row = {"total_reward": float(n), "length": n,
               "status": "TRUNCATED" if n == 500 else "TERMINATED",
               "extras": {"epsilon": max(0.04, 1 - total / 8_000), "loss": float(rng.random())},
               "episode": episode, "total_steps": total}  # fmt: skip
        lines.append(json.dumps(row) + "\n")
    (directory / "train_episodes.jsonl").write_text("".join(lines))
    evals = []
    for at in range(10_000, STEPS + 1, 10_000):
        for _ in range(10):
            evals.append(json.dumps({"total_reward": 500.0, "length": 500, "status": "TRUNCATED",
                                     "extras": {}, "total_steps_at_eval": at}) + "\n")  # fmt: skip
    (directory / "eval_episodes.jsonl").write_text("".join(evals))
    return len(lines)


def _make_root(root: Path, kind: str) -> dict[str, int]:
    """``RUNS`` single runs plus one run of ``SEEDS`` seeds; returns episodes per run id."""
    episodes = {}
    for k in range(RUNS):
        run = TrainingRun.create("CartPole-v1", kind, root=root)
        run.update_metadata(STEPS, 0, best_eval_reward=500.0)
        episodes[f"CartPole-v1/{kind}/{run.dir.name}"] = _write_run(run.dir, kind, k)
    group = root / "CartPole-v1" / f"{kind}-seeds" / "20260101_000000"
    for s in range(SEEDS):
        staged = TrainingRun.create("staging", "v", root=root / ".staging")
        (group).mkdir(parents=True, exist_ok=True)
        staged.dir.rename(group / f"seed_{s}")
        TrainingRun.resume(group / f"seed_{s}").update_metadata(STEPS, 0)
        _write_run(group / f"seed_{s}", kind, 100 + s)
    episodes[f"CartPole-v1/{kind}-seeds/20260101_000000"] = SEEDS
    return episodes


@pytest.fixture(scope="module", params=["learning", "random"])
def root(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"runs_{request.param}")
    return path, _make_root(path, request.param)


class _Client:
    def __init__(self, root: Path) -> None:
        self.server = make_server(root, port=0)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.conn = http.client.HTTPConnection(*self.server.server_address[:2], timeout=30)

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        body = resp.read()
        assert resp.status == 200
        return body

    def series(self, path: str, cursor: str | None = None) -> tuple[int, int, str]:
        """Every page of a series after ``cursor``: (pages, bytes received, the last cursor)."""
        pages = size = 0
        while True:
            url = path if cursor is None else f"{path}&cursor={quote(cursor, safe='')}"
            body = self.get(url)
            page = json.loads(body)
            pages, size, cursor = pages + 1, size + len(body), page["cursor"]
            if not page["more"]:
                return pages, size, cursor

    def close(self) -> None:
        self.conn.close()
        self.server.shutdown()
        self.server.server_close()


def _append(root: Path, n: int = 3) -> None:
    """A few more episodes at the end of every training log (as runs in progress write)."""
    for log in root.rglob("train_episodes.jsonl"):
        with open(log, "a") as f:
            for _ in range(n):
                f.write(json.dumps({"total_reward": 500.0, "length": 500, "status": "TRUNCATED",
                                    "extras": {"epsilon": 0.04, "loss": 0.1},
                                    "total_steps": STEPS}) + "\n")  # fmt: skip


def _series_path(root_and_runs, multi: bool) -> str:
    _, episodes = root_and_runs
    run_id = [r for r in episodes if r.endswith("20260101_000000") == multi][0]
    return "/api/series?run=" + quote(run_id, safe="")


def _bench(benchmark, root_and_runs, path: str, warm: bool) -> None:
    root, episodes = root_and_runs
    clients = []

    def setup():
        client = _Client(root)
        clients.append(client)
        if warm:
            client.get(path)
            _append(root)
        return (client,), {}

    def fetch(c):
        return c.get(path) if path == "/api/runs" else c.series(path)[1]

    try:
        body = benchmark.pedantic(fetch, setup=setup, rounds=5, iterations=1)
    finally:
        for c in clients:
            c.close()
    single = [n for r, n in episodes.items() if not r.endswith("20260101_000000")]
    benchmark.extra_info["runs"] = len(episodes)
    benchmark.extra_info["episodes_per_run_mean"] = float(np.mean(single))
    benchmark.extra_info["response_bytes"] = body if isinstance(body, int) else len(body)
    benchmark.extra_info["under_200_ms"] = benchmark.stats.stats.max < 0.2


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_dashboard_list(benchmark, root, warm):
    """GET /api/runs over 20 runs of 50,000 steps and one 5-seed run."""
    _bench(benchmark, root, "/api/runs", warm)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("multi", [False, True], ids=["single", "5seeds"])
def test_dashboard_series(benchmark, root, warm, multi):
    """GET /api/series for one run (single, or 5 seeds with the IQM and its bootstrap band)."""
    _bench(benchmark, root, _series_path(root, multi), warm)


# -- one big log (issue 23) ----------------------------------------------------------

BIG_MB = 40


def _big_row(k: int, rng_value: float) -> str:
    return json.dumps({"total_reward": 20.0 + k % 480, "length": 20 + k % 480,
                       "status": "TERMINATED",
                       "extras": {"epsilon": max(0.04, 1 - k / 8_000), "loss": rng_value},
                       "episode": k, "total_steps": 250 * (k + 1)}) + "\n"  # fmt: skip


@pytest.fixture(scope="module")
def big_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs_big")
    run = TrainingRun.create("Big-v0", "big", root=root)
    rng = np.random.default_rng(0)
    k = 0
    with open(run.dir / "train_episodes.jsonl", "w") as f:
        while f.tell() < BIG_MB * 1_000_000:
            f.write("".join(_big_row(k + j, v) for j, v in enumerate(rng.random(10_000))))
            k += 10_000
    run.update_metadata(250 * k, k)
    return root, "/api/series?run=" + quote(f"Big-v0/big/{run.dir.name}", safe=""), k


def _peak_per_page(client: _Client, path: str) -> int:
    """tracemalloc's peak while one page request is served (this process serves it)."""
    tracemalloc.start()
    try:
        client.get(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("what", ["first_page", "all_pages", "incremental"])
def test_dashboard_big_log_series(benchmark, big_root, what):
    """The series of one run with a 40 MB training log, on a fresh server each round."""
    root, path, episodes = big_root
    clients, info = [], {}

    def setup():
        client = _Client(root)
        clients.append(client)
        cursor = None
        if what == "incremental":
            _, _, cursor = client.series(path)
            with open(next(root.rglob("train_episodes.jsonl")), "a") as f:
                f.write("".join(_big_row(episodes + j, 0.5) for j in range(100)))
        return (client, cursor), {}

    def fetch(client, cursor):
        if what == "first_page":
            info["bytes"] = len(client.get(path))
            info["pages"] = 1
        else:
            info["pages"], info["bytes"], _ = client.series(path, cursor)

    try:
        benchmark.pedantic(fetch, setup=setup, rounds=3, iterations=1)
        peak_client = _Client(root)
        clients.append(peak_client)
        benchmark.extra_info["peak_bytes_first_page_request"] = _peak_per_page(peak_client, path)
    finally:
        for c in clients:
            c.close()
    log = next(root.rglob("train_episodes.jsonl"))
    benchmark.extra_info.update(log_mb=log.stat().st_size / 1e6, episodes=episodes,
                                pages=info["pages"], response_bytes=info["bytes"])  # fmt: skip


def test_dashboard_big_log_list_while_reading(benchmark, big_root):
    """GET /api/runs while another client pages through the 40 MB log on a fresh server."""
    root, path, _ = big_root
    stop = threading.Event()
    reads = []

    def reader():
        while not stop.is_set():
            c = _Client(root)  # a fresh store: the log is parsed again
            t0 = time.perf_counter()
            c.series(path)
            reads.append(time.perf_counter() - t0)
            c.close()

    lister = _Client(root)
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        time.sleep(0.5)  # the reader is mid-log
        benchmark.pedantic(lambda: lister.get("/api/runs"), rounds=30, iterations=1)
    finally:
        stop.set()
        thread.join(120)
        lister.close()
    benchmark.extra_info["reader_full_reads_s"] = reads
