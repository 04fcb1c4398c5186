"""Many seeds on a real Dask cluster on loopback: a killed worker, a killed client, no scheduler.

The tests start ``dask scheduler`` and two ``dask worker --nworkers 1
--nthreads 1`` processes bound to 127.0.0.1 (stopped at the end, also on
failure) and run ``ember-np train --seeds 4 --scheduler ADDRESS`` against
them; every seed must be byte for byte the run ``ember-np train --seed s``
makes on this machine (files compared as tests/test_multiseed.py does).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import SMALL_ARGS, still_running
from test_multiseed import assert_same_run, only_dir

from ember_np.cli import main
from ember_np.training.multiseed import load_multiseed

pytest.importorskip("distributed")

pytestmark = [
    pytest.mark.xdist_group("dask"),  # one cluster for the file, on one pytest worker
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals, loopback cluster"),
]

ROOT = Path(__file__).resolve().parents[1]
# Long enough that a kill at the first progress event lands mid-seed (~1 s a seed).
ARGS = ["train", "CartPole-v1", "--steps", "12000", "--eval-every", "6000", "--eval-episodes",
        "2", "--checkpoint-freq", "4000", *SMALL_ARGS]  # fmt: skip
SEEDS = 4


def child_env() -> dict[str, str]:
    """The environment of every process the tests start: this checkout's ember_np first."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path)


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two single-threaded workers on 127.0.0.1; yields (address, client)."""
    from ember_np.training.cluster import connect

    here = tmp_path_factory.mktemp("dask")
    dask = [sys.executable, "-m", "dask"]
    logs = (here / "cluster.log").open("w")
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(here / "scheduler.json")],
                              stdout=logs, stderr=subprocess.STDOUT, env=child_env())]  # fmt: skip
    client = None
    try:
        deadline = time.time() + 60
        while not (here / "scheduler.json").exists():
            assert time.time() < deadline and procs[0].poll() is None, "no scheduler started"
            time.sleep(0.05)
        time.sleep(0.1)  # the file is written in one go, but not atomically
        address = json.loads((here / "scheduler.json").read_text())["address"]
        for i in range(2):
            procs.append(subprocess.Popen(
                [*dask, "worker", address, "--nworkers", "1", "--nthreads", "1", "--host",
                 "127.0.0.1", "--no-dashboard", "--local-directory", str(here / f"w{i}")],
                stdout=logs, stderr=subprocess.STDOUT, env=child_env()))  # fmt: skip
        client = connect(address)
        client.wait_for_workers(2, timeout=60)
        yield address, client
    finally:
        if client is not None:
            client.close()
        stop(procs[1:])  # the workers (and their nannies) first, then the scheduler
        stop(procs[:1])
        logs.close()


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory) -> dict[int, Path]:
    """``ember-np train ARGS --seed s`` for s in 0..3, in this process: the reference runs
    (and a warm compile cache before the workers load the kernels)."""
    root = tmp_path_factory.mktemp("local")
    runs = {}
    for seed in range(SEEDS):
        assert main([*ARGS, "--seed", str(seed), "--root", str(root / f"s{seed}")]) == 0
        runs[seed] = only_dir(root / f"s{seed}" / "CartPole-v1" / "ember")
    return runs


def start_cli(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ember_np", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())  # fmt: skip


def first_progress(client, proc: subprocess.Popen, root: Path) -> tuple[Path, dict]:
    """The parent directory and the ``start`` event of the first seed that reports steps
    (a seed under way, far from its end), once one does."""
    from ember_np.training.cluster import topic

    deadline = time.time() + 120
    while True:
        still_running(proc, deadline, "a seed reporting steps")
        found = list(root.glob("*/*/*/seeds.json"))
        if found:
            parent = found[0].parent
            events = [m for _, m in client.get_events(topic(parent))]
            steps = [m for m in events if m["event"] == "steps" and m["steps"] <= 3000]
            if steps:
                (start,) = [m for m in events if m["event"] == "start"
                            and m["attempt"] == steps[0]["attempt"]]  # fmt: skip
                return parent, start
        time.sleep(0.02)


def assert_seeds_are_the_local_runs(parent: Path, local_runs: dict[int, Path], seeds) -> None:
    result = load_multiseed(parent)
    assert sorted(r.seed for r in result.runs) == sorted(seeds) and result.failed == []
    for seed in seeds:
        run = parent / f"seed_{seed}"
        assert_same_run(run, local_runs[seed])
        files = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
        local = sorted(str(p.relative_to(local_runs[seed])) for p in local_runs[seed].rglob("*"))
        # every file came back, nothing else; the worker's lock is not copied (the
        # client's seed directory is not locked by a process that has ended)
        assert files == sorted([*(f for f in local if f != ".lock"), "result.json"])
        data = json.loads((run / "result.json").read_text())
        assert data["run_dir"] == str(run) and data["seed"] == seed  # the client's path


def test_a_worker_sigkilled_mid_seed_costs_only_that_seeds_progress(cluster, local_runs,
                                                                    tmp_path):  # fmt: skip
    from ember_np.training.cluster import topic, trainings

    address, client = cluster
    proc = start_cli([*ARGS, "--seeds", str(SEEDS), "--scheduler", address, "--root",
                      str(tmp_path)])  # fmt: skip
    parent, start = first_progress(client, proc, tmp_path)
    os.kill(start["pid"], signal.SIGKILL)  # the worker process training that seed
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"on the Dask cluster at {address} (2 workers, 2 threads)" in out
    assert f"{SEEDS} of {SEEDS} seeds finished" in out and "IQM [95% CI]" in out
    killed = start["seed"]
    assert f"seed {killed}: its worker {start['worker']} (pid {start['pid']}) was lost" in err
    starts = [m["seed"] for _, m in client.get_events(topic(parent)) if m["event"] == "start"]
    assert starts.count(killed) == 2  # the kill landed mid-seed; the scheduler ran it again
    assert trainings(client, parent) == {s: 1 for s in range(SEEDS)}  # none twice to the end
    assert_seeds_are_the_local_runs(parent, local_runs, range(SEEDS))


def test_a_client_killed_mid_run_leaves_a_parent_that_resume_on_the_cluster_finishes(
    cluster, local_runs, tmp_path, capsys
):
    from ember_np.training.cluster import trainings

    address, client = cluster
    client.wait_for_workers(2, timeout=60)  # the nanny restarts a killed worker
    proc = start_cli([*ARGS, "--seeds", "2", "--scheduler", address, "--root", str(tmp_path)])
    parent, _ = first_progress(client, proc, tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.time() + 30  # its tasks were released: they stop at their next chunk
    while any(client.processing().values()):
        assert time.time() < deadline, client.processing()
        time.sleep(0.05)
    assert load_multiseed(parent).runs == []
    assert main(["resume", str(parent), "--scheduler", address, "--quiet"]) == 0
    assert "2 of 2 seeds finished" in capsys.readouterr().out
    assert trainings(client, parent) == {0: 1, 1: 1}  # the orphaned tasks never finished
    assert_seeds_are_the_local_runs(parent, local_runs, [0, 1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_is_one_line_exit_2_and_nothing_written(tmp_path, capsys):
    import dask

    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        assert main([*ARGS, "--seeds", "2", "--scheduler", address, "--root",
                     str(tmp_path / "runs")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"no Dask scheduler answered at {address} within 1 s" in err
    assert not (tmp_path / "runs").exists()
    parent = tmp_path / "p"  # resume: refused before anything is moved
    parent.mkdir()
    (parent / "seeds.json").write_text("{}")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        assert main(["resume", str(parent), "--scheduler", address]) == 2
    assert "no Dask scheduler answered" in capsys.readouterr().err
    assert sorted(p.name for p in parent.iterdir()) == ["seeds.json"]


def test_a_failed_connect_leaves_no_client_for_the_garbage_collector_to_close_later():
    """A Client whose constructor raised lives on in reference cycles; collected later,
    inside the next Client's start, its ``__del__`` waited for ever for the lock that
    start holds (distributed's LoopRunner._lock): the cluster fixture hung after the
    unreachable-scheduler test. connect() collects it before it raises; with the
    collector off, nothing else would."""
    import gc

    import dask
    import distributed

    from ember_np.training.cluster import ClusterError, connect

    def clients() -> int:
        return sum(isinstance(o, distributed.Client) for o in gc.get_objects())

    gc.collect()
    before = clients()
    gc.disable()
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            with pytest.raises(ClusterError, match="no Dask scheduler answered") as raised:
                connect(f"tcp://127.0.0.1:{free_port()}")
        left = clients()
    finally:
        gc.enable()
    assert raised.value.__context__ is None  # nothing keeps the failed client's frames
    assert left == before


@pytest.mark.parametrize("failures", [1, 2, 3])
def test_a_client_whose_event_loop_did_not_start_is_made_again(monkeypatch, failures):
    """distributed's Client fails with a bare AssertionError when its IO-loop thread does
    not start within 10 s (a busy machine; seen once in CI): made again, up to
    START_ATTEMPTS times, then a ClusterError that says so, not an AssertionError."""
    import distributed

    from ember_np.training import cluster

    made = []

    class SlowToStart:
        def __init__(self, address, timeout, set_as_default):
            made.append(address)
            if len(made) <= failures:
                raise AssertionError

    monkeypatch.setattr(distributed, "Client", SlowToStart)
    address = "tcp://127.0.0.1:1"
    if failures < cluster.START_ATTEMPTS:
        assert isinstance(cluster.connect(address), SlowToStart)
        assert made == [address] * (failures + 1)
    else:
        with pytest.raises(cluster.ClusterError, match="did not start its event-loop thread"):
            cluster.connect(address)
        assert len(made) == cluster.START_ATTEMPTS


@pytest.mark.parametrize(
    "args, message",
    [
        (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler trains the seeds of a multi-seed"),
        (["--seeds", "2", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"],
         "--workers counts processes on this machine"),
        (["--seeds", "2", "--scheduler", "nonsense"], "'nonsense' is not a scheduler address"),
    ],
)  # fmt: skip
def test_scheduler_options_that_cannot_work_are_one_line(args, message, tmp_path, capsys):
    assert main([*ARGS, *args, "--root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "address, port",
    [("tcp://127.0.0.1:99999", 99999), ("tcp://127.0.0.1:0", 0), ("[::1]:65536", 65536)],
)
def test_a_port_out_of_range_is_said_at_once(address, port, tmp_path, capsys, monkeypatch):
    import distributed

    def no_client(*args, **kwargs):  # "at once": no connection is even tried
        raise AssertionError("a client was made")

    monkeypatch.setattr(distributed, "Client", no_client)
    assert main([*ARGS, "--seeds", "2", "--scheduler", address, "--root",
                 str(tmp_path / "runs")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"is {port}, outside 1..65535" in err, err
    assert not (tmp_path / "runs").exists()


def test_tls_without_a_tls_configuration_says_what_tls_needs(tmp_path, capsys, monkeypatch):
    import dask
    import distributed

    monkeypatch.setattr(distributed, "Client", lambda *a, **k: pytest.fail("a client was made"))
    address = "tls://127.0.0.1:8786"
    assert main([*ARGS, "--seeds", "2", "--scheduler", address, "--root",
                 str(tmp_path / "runs")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a scheduler address" not in err, err
    assert f"{address} is a TLS scheduler address, but no TLS is configured" in err
    assert "distributed.comm.tls.ca-file" in err and "DASK_DISTRIBUTED__COMM__TLS__CA_FILE" in err
    monkeypatch.undo()
    # Configured as the line says, the address is tried (and nothing listens there).
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    tls = {"distributed.comm.tls.ca-file": str(cert), "distributed.comm.tls.client.cert":
           str(cert), "distributed.comm.tls.client.key": str(key),
           "distributed.comm.timeouts.connect": "1s"}  # fmt: skip
    address = f"tls://127.0.0.1:{free_port()}"
    with dask.config.set(tls):
        assert main([*ARGS, "--seeds", "2", "--scheduler", address, "--root",
                     str(tmp_path / "runs")]) == 2  # fmt: skip
    assert f"no Dask scheduler answered at {address}" in capsys.readouterr().err


def test_without_a_scheduler_dask_is_not_imported(tmp_path):
    code = (
        "import sys\n"
        "from ember_np.cli import main\n"
        f"code = main({[*ARGS, '--steps', '500', '--seeds', '2', '--workers', '1', '--root', str(tmp_path)]!r})\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')"
        " or m == 'ember_np.training.cluster'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=child_env(), timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "0 []"


def test_a_seed_that_raises_on_a_worker_is_named_and_the_others_go_on(cluster, tmp_path, capsys):
    from ember_np.training.multiseed import train_seeds
    from ember_np.training.spec import RunSpec

    _, client = cluster
    client.wait_for_workers(2, timeout=60)
    result = train_seeds(
        RunSpec("NoSuchEnv-v0", steps=100),
        [3, 4],
        root=tmp_path,
        progress=False,
        scheduler=client,
    )  # fmt: skip  (a client of the caller's: left open)
    assert result.failed == [3, 4] and result.runs == []
    err = capsys.readouterr().err
    for seed in (3, 4):
        assert f"seed {seed} did not finish: it raised " in err and "NoSuchEnv" in err
        assert not (result.parent / f"seed_{seed}").exists()  # nothing of it was written
    assert client.status == "running"


def test_ppo_seeds_on_the_cluster_are_the_runs_made_alone(cluster, tmp_path):
    """The algorithm travels with the spec: a PPO seed trained by a Dask worker is the
    run ``ember-np train --algo ppo --seed s`` makes here."""
    address, _ = cluster
    args = ["train", "CartPole-v1", "--algo", "ppo", "--steps", "1000", "--eval-every", "500",
            "--eval-episodes", "2", "--checkpoint-freq", "500", "--quiet"]  # fmt: skip
    assert main([*args, "--seed", "1", "--root", str(tmp_path / "alone")]) == 0
    alone = only_dir(tmp_path / "alone" / "CartPole-v1" / "zoo")
    assert main([*args, "--seeds", "0,1", "--scheduler", address,
                 "--root", str(tmp_path / "cluster")]) == 0  # fmt: skip
    (seeds_json,) = (tmp_path / "cluster").rglob("seeds.json")
    assert json.loads(seeds_json.read_text())["spec"]["algorithm"] == "ppo"
    assert_same_run(seeds_json.parent / "seed_1", alone)
