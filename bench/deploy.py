"""Deployment cost of one CartPole policy (S1 shape, 4-64-64-2) served four ways.

    python bench/deploy.py [--runs 5] [--calls 20000] [--paths numpy,numba,onnxruntime,sb3]
                           [--out bench/results_deploy.md]

Each measurement is a fresh Python process that loads the policy from its
file and acts on one CartPole observation, as a service would at start-up.
ember_np's modules are byte-compiled first (``python -m compileall``), as
``pip install`` does: run from a checkout with ``PYTHONDONTWRITEBYTECODE=1``
set, every process would otherwise compile them from source again (about
15% of the NumPy-only path's start-up).

* ``numpy``: ``from ember_np.policy import DqnPolicy``, ``DqnPolicy.load(npz, backend="numpy")``
* ``numba``: the same with ``backend="numba"`` (numba's cache warm, as after a first run)
* ``onnxruntime``: ``InferenceSession`` on the file ``ember-np export`` wrote
  (one intra-op thread), action = argmax of ``q_values``
* ``sb3``: ``stable_baselines3.DQN.load(zip)`` + ``predict(obs, deterministic=True)``
  (torch CPU, one thread), a DQN with ``net_arch=[64, 64]`` on CartPole-v1

Columns, the median over ``--runs`` processes:

* import: the import statements of that path (for numba: ember_np's kernel module);
* first action: wall time from starting the process to the first action returned
  (interpreter start-up, imports, loading the file, first call);
* peak RSS: the process's maximum resident set (``os.wait4`` rusage);
* installed: the files of the distributions the path needs (RECORD of each, with
  their required dependencies, recursively; ember_np's own sources counted once);
* per call: one ``act`` / ``run`` / ``predict`` on a single observation, from a
  Python loop after 1,000 warm-up calls: the mean of the fastest block of
  200 calls (``--calls`` / 200 blocks), since other processes on the machine
  only ever add time.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from machine_info import cpu_model
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
OBS = [0.0123, -0.0456, 0.0321, 0.0111]
PATHS = ("numpy", "numba", "onnxruntime", "sb3")

_TIMING = """
def _per_call_us(fn, calls):
    for _ in range(1000):
        fn()
    block = min(200, calls)  # short blocks: some escape the other processes' time slices
    means = []
    for _ in range(max(1, calls // block)):
        t = time.perf_counter()
        for _ in range(block):
            fn()
        means.append((time.perf_counter() - t) / block * 1e6)
    return min(means)  # the least disturbed block: other processes only ever add time
"""

# Each child: imports (timed), load, first action, then the per-call loop; prints JSON.
CHILD = {
    "numpy": """
        t0 = time.perf_counter()
        import numpy as np
        from ember_np.policy import DqnPolicy
        t_import = time.perf_counter() - t0
        policy = DqnPolicy.load(FILES["npz"], backend="numpy")
        obs = np.array(OBS, dtype=np.float32)
        action = policy.act(obs)
        t_first = time.time()
        fn = lambda: policy.act(obs)
    """,
    "numba": """
        t0 = time.perf_counter()
        import numpy as np
        from ember_np.policy import DqnPolicy
        import ember_np.dqn.learner.network  # numba and the kernels' module
        t_import = time.perf_counter() - t0
        policy = DqnPolicy.load(FILES["npz"], backend="numba")
        obs = np.array(OBS, dtype=np.float32)
        action = policy.act(obs)
        t_first = time.time()
        fn = lambda: policy.act(obs)
    """,
    "onnxruntime": """
        t0 = time.perf_counter()
        import numpy as np
        import onnxruntime as ort
        t_import = time.perf_counter() - t0
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        sess = ort.InferenceSession(FILES["onnx"], options, providers=["CPUExecutionProvider"])
        obs = np.array([OBS], dtype=np.float32)
        act = lambda: int(sess.run(["q_values"], {"obs": obs})[0][0].argmax())
        action = act()
        t_first = time.time()
        fn = act
    """,
    "sb3": """
        t0 = time.perf_counter()
        import numpy as np
        import torch
        from stable_baselines3 import DQN
        t_import = time.perf_counter() - t0
        torch.set_num_threads(1)
        model = DQN.load(FILES["zip"], device="cpu")
        obs = np.array(OBS, dtype=np.float32)
        action = int(model.predict(obs, deterministic=True)[0])
        t_first = time.time()
        fn = lambda: model.predict(obs, deterministic=True)
    """,
}

# Distributions each path installs (their required dependencies are added).
NEEDS = {
    "numpy": ["numpy"],  # + ember_np installed with --no-deps
    "numba": ["numpy", "numba", "gymnasium", "tqdm"],  # + ember_np (its dependencies)
    "onnxruntime": ["onnxruntime"],
    "sb3": ["stable-baselines3"],
}


def _closure(names: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _dist_bytes(name: str) -> int:
    dist = md.distribution(name)
    total = 0
    for f in dist.files or []:
        p = Path(dist.locate_file(f))
        if p.is_file():
            total += p.stat().st_size
    return total


def _ember_np_bytes() -> int:
    """ember_np's own files as a wheel installs them (sources, no caches)."""
    return sum(
        p.stat().st_size
        for p in (ROOT / "ember_np").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".nbi", ".nbc")
    )


def installed_mb(path: str) -> tuple[float, list[str]]:
    dists = sorted(_closure(NEEDS[path]))
    total = sum(_dist_bytes(d) for d in dists)
    if path in ("numpy", "numba"):
        total += _ember_np_bytes()
    return total / 1e6, dists


def make_files(tmp: Path, paths: list[str]) -> dict[str, str]:
    """The S1 policy as an ember_np checkpoint, its ONNX export and an SB3 zip."""
    files = {"npz": str(tmp / "policy.npz"), "onnx": str(tmp / "policy.onnx")}
    setup = f"""
        from ember_np import DqnAgent, DqnConfig, IndexActionMapper, VecEncoder
        agent = DqnAgent(VecEncoder(4), IndexActionMapper(2), DqnConfig(hidden_sizes=(64, 64)), 0)
        agent.save({files["npz"]!r})
        agent.act([0.0, 0.0, 0.0, 0.0])  # compiles / loads the act kernel into numba's cache
    """
    if "onnxruntime" in paths:
        setup += f"""
        from ember_np.export import export_onnx
        export_onnx({files["npz"]!r}, {files["onnx"]!r})
        """
    subprocess.run([sys.executable, "-c", textwrap.dedent(setup)], check=True, cwd=ROOT)
    if "sb3" in paths:
        files["zip"] = str(tmp / "sb3_dqn.zip")
        sb3 = f"""
            import gymnasium as gym
            from stable_baselines3 import DQN
            model = DQN("MlpPolicy", gym.make("CartPole-v1"), device="cpu", seed=0,
                        policy_kwargs={{"net_arch": [64, 64]}})
            model.save({files["zip"]!r})
        """
        subprocess.run([sys.executable, "-c", textwrap.dedent(sb3)], check=True, cwd=ROOT)
    return files


def byte_compile_ember_np() -> None:
    """Write ember_np's ``.pyc`` files, as ``pip install`` does (numpy's are installed)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "ember_np")],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip


def measure_once(path: str, files: dict[str, str], calls: int) -> dict[str, float]:
    code = "\n".join(
        [
            "import json, time",
            f"FILES = {files!r}",
            f"OBS = {OBS!r}",
            textwrap.dedent(_TIMING),
            textwrap.dedent(CHILD[path]),
            f"per_call = _per_call_us(fn, {calls})",
            "print(json.dumps({'t_first': t_first, 'import_s': t_import, "
            "'per_call_us': per_call, 'action': int(action)}))",
        ]
    )
    start = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    out = proc.stdout.read()  # type: ignore[union-attr]
    err = proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{path} failed:\n{err.decode()[-3000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "import_s": result["import_s"],
        "first_action_s": result["t_first"] - start,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # kilobytes on Linux
        "per_call_us": result["per_call_us"],
    }


def measure(path: str, files: dict[str, str], runs: int, calls: int) -> dict[str, float]:
    rows = [measure_once(path, files, calls) for _ in range(runs)]
    out = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    out["installed_mb"], _ = installed_mb(path)
    return out


LABELS = {
    "numpy": 'ember_np, NumPy only (`backend="numpy"`)',
    "numba": 'ember_np, compiled (`backend="numba"`)',
    "onnxruntime": "onnxruntime, exported `.onnx`",
    "sb3": "SB3 `DQN.load` + `predict` (torch CPU)",
}


def _cpu() -> str:
    return cpu_model() or platform.processor() or platform.machine()


def table(results: dict[str, dict[str, float]], command: str) -> str:
    load = os.getloadavg()
    lines = [
        f"`{command}` ({_cpu()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {load[0]:.1f} at the end)",
        "",
        "| path | import | first action | peak RSS | installed | per call |",
        "|---|---|---|---|---|---|",
    ]
    for path, r in results.items():
        lines.append(
            f"| {LABELS[path]} | {r['import_s']:.2f} s | {r['first_action_s']:.2f} s | "
            f"{r['peak_rss_mb']:.0f} MB | {r['installed_mb']:.0f} MB | {r['per_call_us']:.1f} µs |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per path (median)")
    parser.add_argument("--calls", type=int, default=20_000, help="timed calls per process")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset")
    parser.add_argument("--out", help="also write the table (markdown) and JSON beside it")
    args = parser.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"unknown paths {unknown}; choose from {list(PATHS)}")
    command = "python bench/deploy.py " + " ".join(argv if argv is not None else sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        files = make_files(Path(tmp), paths)
        byte_compile_ember_np()
        results = {p: measure(p, files, args.runs, args.calls) for p in paths}
    text = table(results, command.strip())
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
