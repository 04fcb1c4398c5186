"""Many seeds on a loopback Dask cluster against the local worker processes, side by side.

Usage::

    python bench/dask_scaling.py               # 8 seeds of CartPole-v1's default preset, 1 round
    python bench/dask_scaling.py --rounds 3 --seeds 8
    python bench/dask_scaling.py --steps 5000  # a quick check (not the bars' budget)

Each measurement is the whole command ``ember-np train CartPole-v1 --seeds 8
--quiet`` (the default preset, rainbow, 35,000 steps a seed), wall time from
start to exit, in a fresh process:

* ``local 1`` and ``local 2``: ``--workers 1`` / ``2``, today's spawned
  worker processes (``local 1`` is a control: what one more process buys on
  this machine at the moment);
* ``dask 1`` and ``dask 2``: ``--scheduler ADDRESS`` against a fresh
  ``dask scheduler`` and 1 or 2 ``dask worker --nworkers 1 --nthreads 1``
  bound to 127.0.0.1, started (and connected) before the clock starts; the
  workers have not loaded ember_np yet, as the local path's spawned workers;
* ``dask 2 profiler off``: as ``dask 2``, the scheduler and workers started with
  ``DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False`` (Dask's statistical profiler,
  which samples each worker's threads every 10 ms, off);
* ``dask 2, one killed``: as ``dask 2``, and one worker SIGKILLed once a seed
  reports half its steps. Every seed must finish, byte-identical to the same
  seed of this round's ``local 2`` run (config and logs byte for byte,
  checkpoint arrays equal: tests/test_multiseed.py's comparison), and no seed
  may be trained to the end twice: the scheduler keeps each task's
  ``trained`` event (:func:`ember_np.training.cluster.trainings` counts them).

Bars (issue 28): ``dask 2`` >= 1.7x as fast as ``dask 1``; ``dask 2`` at most
5% slower than ``local 2``; the killed run 8 of 8 seeds, identical, none
trained twice. Modes are interleaved, their order alternating each round;
the load average is printed with each measurement (the machine is shared).
CPU: user + system seconds of every process of the measurement (the
command, its worker processes; for the cluster runs also the scheduler, the
nannies and the workers, counted from the command's start to its end), which
on a busy machine says more about the cost of the path than wall time.
For the cluster runs, "concurrency" is the seeds' task time (start to
``trained`` events, the attempt that finished) over the time from the first
start to the last ``trained``: 2.0 means both workers trained all along.
Linux shares the CPU between sessions (autogroups) before processes: on a
busy machine, every process this script starts shares one session's share,
so more workers may not get more CPU, for the local path and the cluster
alike (compare ``local 1`` with ``local 2``). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))  # fmt: skip


#: Dask's statistical profiler off (a worker samples its threads' stacks every 10 ms by
#: default: about 3% of a core, measured with one busy task on one worker).
PROFILER_OFF = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # reaped descendants included
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Cluster:
    """``dask scheduler`` and ``workers`` single-threaded ``dask worker`` on 127.0.0.1."""

    def __init__(self, workers: int, where: Path, profile: bool = True) -> None:
        from distributed import Client

        dask = [sys.executable, "-m", "dask"]
        self.log = (where / "cluster.log").open("w")
        file = where / "scheduler.json"
        env = ENV if profile else dict(ENV, **PROFILER_OFF)
        quiet = {"stdout": self.log, "stderr": subprocess.STDOUT, "env": env}
        self.procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                        "--no-dashboard", "--scheduler-file", str(file)],
                                       **quiet)]  # fmt: skip
        try:
            while not file.exists():
                time.sleep(0.05)
            time.sleep(0.1)
            self.address = json.loads(file.read_text())["address"]
            for i in range(workers):
                self.procs.append(subprocess.Popen(
                    [*dask, "worker", self.address, "--nworkers", "1", "--nthreads", "1",
                     "--host", "127.0.0.1", "--no-dashboard", "--local-directory",
                     str(where / f"w{i}")], **quiet))  # fmt: skip
            self.client = Client(self.address, timeout=30, set_as_default=False)
            self.client.wait_for_workers(workers, timeout=120)
        except BaseException:
            self.close()
            raise

    def cpu(self) -> float:
        """CPU seconds so far of the scheduler, the nannies and their worker processes."""
        pids = [p.pid for p in self.procs]
        for pid in pids:  # grows as it goes: every descendant, of any of their threads
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    children = Path(f"/proc/{pid}/task/{tid}/children").read_text()
                    pids += [int(c) for c in children.split()]
            except FileNotFoundError:
                pass
        return sum(cpu_of(pid) for pid in pids)

    def close(self) -> None:
        if getattr(self, "client", None) is not None:
            self.client.close()
        for group in (self.procs[1:], self.procs[:1]):  # workers, then the scheduler
            for p in group:
                p.terminate()
            for p in group:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.log.close()


def command(seeds: int, steps: int | None, root: Path, extra: list[str]) -> list[str]:
    budget = ["--steps", str(steps)] if steps else []
    return [sys.executable, "-m", "ember_np", "train", "CartPole-v1", "--seeds", str(seeds),
            "--quiet", "--root", str(root), *budget, *extra]  # fmt: skip


def timed(cmd: list[str], on_start=None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)  # fmt: skip
    if on_start is not None:
        on_start(proc)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out}\n{err}")
    return wall


def parent_of(root: Path) -> Path:
    (spec,) = root.glob("*/*/*/seeds.json")
    return spec.parent


def same_run(a: Path, b: Path) -> bool:
    """tests/test_multiseed.py's comparison: config, logs byte for byte, checkpoint arrays."""
    if json.loads((a / "config.json").read_text()) != json.loads((b / "config.json").read_text()):
        return False
    for log in ("train_episodes.jsonl", "eval_episodes.jsonl"):
        if (a / log).read_bytes() != (b / log).read_bytes():
            return False
    names = sorted(p.name for p in (a / "checkpoints").iterdir())
    if names != sorted(p.name for p in (b / "checkpoints").iterdir()):
        return False
    for name in names:
        with np.load(a / "checkpoints" / name) as x, np.load(b / "checkpoints" / name) as y:
            if sorted(x.files) != sorted(y.files):
                return False
            if not all(np.array_equal(x[k], y[k]) for k in x.files):
                return False
    return True


def kill_mid_run(cluster: Cluster, root: Path, half: int, killed: list[dict]):
    """An ``on_start`` that SIGKILLs the worker of the first seed to report ``half`` steps."""
    from ember_np.training.cluster import topic

    def watch(proc: subprocess.Popen) -> None:
        while proc.poll() is None:
            found = list(root.glob("*/*/*/seeds.json"))
            if found:
                events = [m for _, m in cluster.client.get_events(topic(found[0].parent))]
                steps = [m for m in events if m["event"] == "steps" and m["steps"] >= half]
                if steps:
                    (start,) = [m for m in events if m["event"] == "start"
                                and m["attempt"] == steps[0]["attempt"]]  # fmt: skip
                    os.kill(start["pid"], signal.SIGKILL)
                    killed.append(start)
                    return
            time.sleep(0.02)

    return watch


def concurrency(client, parent: Path) -> float:
    """Task time of the attempts that finished / (last ``trained`` - first ``start``)."""
    from ember_np.training.cluster import topic

    events = client.get_events(topic(parent))
    start = {m["attempt"]: t for t, m in events if m["event"] == "start"}
    done = {m["attempt"]: t for t, m in events if m["event"] == "trained"}
    busy = sum(done[a] - start[a] for a in done)
    return busy / (max(done.values()) - min(start.values()))


def measure(mode: str, args: argparse.Namespace, where: Path, reference: Path | None) -> dict:
    root = where / "runs"
    before = load()
    out: dict = {"load": before}
    c0 = children_cpu()
    if mode.startswith("local"):
        out["wall"] = timed(command(args.seeds, args.steps, root, ["--workers", mode[-1]]))
        out["parent"] = parent_of(root)
        out["cpu"] = children_cpu() - c0  # the command and its worker processes
    else:
        workers = 1 if mode.startswith("dask 1") else 2
        cluster = Cluster(workers, where, profile="profiler off" not in mode)
        try:
            extra = ["--scheduler", cluster.address]
            killed: list[dict] = []
            watch = None
            if "killed" in mode:
                from ember_np.presets import default_preset

                half = (args.steps or default_preset("CartPole-v1").steps) // 2
                watch = kill_mid_run(cluster, root, half, killed)
            cluster_c0 = cluster.cpu()
            out["wall"] = timed(command(args.seeds, args.steps, root, extra), watch)
            if "killed" not in mode:  # a killed worker's CPU is gone with it
                out["cpu"] = children_cpu() - c0 + cluster.cpu() - cluster_c0
            parent = parent_of(root)
            out["parent"] = parent
            out["concurrency"] = concurrency(cluster.client, parent)
            if "killed" in mode:
                from ember_np.training.cluster import trainings
                from ember_np.training.multiseed import load_multiseed

                result = load_multiseed(parent)
                counts = trainings(cluster.client, parent)
                same = sum(same_run(parent / f"seed_{s}", reference / f"seed_{s}")
                           for s in range(args.seeds)) if reference else None  # fmt: skip
                out["killed"] = (
                    f"killed seed {killed[0]['seed']}'s worker (pid {killed[0]['pid']}) at >= "
                    f"{half:,} steps; {len(result.runs)} of {args.seeds} finished; "
                    f"{same} of {args.seeds} identical to local 2's; trained to the end per "
                    f"seed: max {max(counts.values())}, total {sum(counts.values())}"
                    if killed
                    else "the run ended before a seed reached half its steps"
                )
        finally:
            cluster.close()
    out["load"] = f"{before} -> {load()}"
    if "cpu" in out:
        out["load"] += f"; CPU {out['cpu']:.1f} s"
    if "concurrency" in out:
        out["load"] += f"; concurrency {out['concurrency']:.2f}"
    print(f"{mode}: {out['wall']:.1f} s (load {out['load']})" + (
        f"; {out['killed']}" if "killed" in out else ""), file=sys.stderr)  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--steps", type=int, help="instead of the preset's budget (a quick check)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--modes", default="local 2,local 1,dask 1,dask 2,dask 2 one killed",
                   help="comma-separated; local 2 first (the killed run's reference)")  # fmt: skip
    args = p.parse_args()
    modes = args.modes.split(",")
    walls: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    notes = []
    print(f"load average before: {load()}", file=sys.stderr)
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            reference = None
            order = modes if r % 2 == 0 else [modes[0], *reversed(modes[1:])]  # local first
            for mode in order:
                where = Path(tmp) / mode.replace(" ", "_")
                where.mkdir()
                got = measure(mode, args, where, reference)
                walls[mode].append(got["wall"])
                if "cpu" in got:
                    cpus[mode].append(got["cpu"])
                if mode == "local 2":
                    reference = got["parent"]  # kept until the round ends
                notes.append(f"round {r + 1}, {mode}: load {got['load']}"
                             + (f"; {got['killed']}" if "killed" in got else ""))  # fmt: skip
    med = {m: statistics.median(w) for m, w in walls.items() if w}
    budget = f"{args.steps:,} steps" if args.steps else "the preset's 35,000 steps"
    lines = [f"`ember-np train CartPole-v1 --seeds {args.seeds} --quiet` (rainbow, {budget} a "
             f"seed), whole command, {args.rounds} round(s), median", "",
             "| mode | wall time (median) | per round | CPU s of all its processes (median) |",
             "|---|---|---|---|"]  # fmt: skip
    for m, w in walls.items():
        if w:
            cpu = f"{statistics.median(cpus[m]):.1f} s" if cpus[m] else "-"
            lines.append(f"| {m} | {med[m]:.1f} s | {', '.join(f'{x:.1f}' for x in w)} | {cpu} |")
    lines.append("")
    if "local 1" in med and "local 2" in med:
        lines.append(f"- control, local 2 processes vs 1: {med['local 1'] / med['local 2']:.2f}x")
    if "dask 1" in med and "dask 2" in med:
        lines.append(f"- 2 workers vs 1 (bar >= 1.7x): **{med['dask 1'] / med['dask 2']:.2f}x**")
    for dask2 in ("dask 2", "dask 2 profiler off"):
        if "local 2" in med and dask2 in med:
            extra = med[dask2] / med["local 2"] - 1
            lines.append(f"- cluster ({dask2}) vs local 2 processes (bar <= +5%): "
                         f"**{extra:+.1%}**")  # fmt: skip
            if cpus.get(dask2) and cpus.get("local 2"):
                more = statistics.median(cpus[dask2]) / statistics.median(cpus["local 2"]) - 1
                lines.append(f"- CPU time, cluster ({dask2}) vs local 2 processes: {more:+.1%}")
    lines += [f"- {n}" for n in notes]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
