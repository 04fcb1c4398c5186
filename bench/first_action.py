"""Time to the first action of a NumPy-only policy in a fresh process, in a given Python.

    python bench/first_action.py --python /path/to/venv/bin/python --checkpoint best.npz [--runs 11]

The deployment recipe's measurement: a venv with only NumPy and ``pip install
--no-deps ember-np`` (no numba, no gymnasium), a fresh process that runs
``from ember_np.policy import DqnPolicy; DqnPolicy.load(path).act(obs)``.
Wall time from starting the process to its exit after the first action
(``os.posix_spawn`` + ``os.wait4``), and its peak RSS; median over ``--runs``
processes. ``bench/deploy.py`` measures the same in this Python beside the
other paths (compiled, onnxruntime, SB3); this script measures it in the
minimal install a deployment has.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

CODE = (
    "import numpy as np\n"
    "from ember_np.policy import DqnPolicy\n"
    "p = DqnPolicy.load({path!r})\n"
    "a = p.act(np.zeros({obs_size}, dtype=np.float32))\n"
    "import sys; sys.modules.get('numba') is None or sys.exit(3)\n"
)


def one(python: str, code: str) -> tuple[float, float]:
    """Seconds from spawn to exit, and peak RSS in MB, of ``python -c code``."""
    t0 = time.perf_counter()
    pid = os.posix_spawn(python, [python, "-c", code], dict(os.environ))
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the policy process failed (exit {os.waitstatus_to_exitcode(status)})")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--obs-size", type=int, default=4)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    code = CODE.format(path=os.path.abspath(args.checkpoint), obs_size=args.obs_size)
    one(args.python, code)  # warm the page cache and the byte-code
    results = [one(args.python, code) for _ in range(args.runs)]
    times = sorted(t for t, _ in results)
    rss = statistics.median(r for _, r in results)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"first action: median {statistics.median(times):.3f} s, min {times[0]:.3f} s, "
          f"max {times[-1]:.3f} s over {args.runs} fresh processes; peak RSS {rss:.1f} MB; "
          f"python {args.python}; load average {load}")  # fmt: skip


if __name__ == "__main__":
    main()
