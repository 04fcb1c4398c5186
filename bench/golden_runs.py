"""Fingerprint the files short runs write, to show a refactor changes no number.

Runs a fixed list of short ``ember-np`` commands (the default and ``zoo``
presets on CartPole-v1, Acrobot-v1 with C51, a 4-env compiled run, a
gymnasium vector run, a 2-seed run, a resumed run and a one-trial tune) into
a scratch directory and prints one SHA-256 per file written. Wall-clock
fields (``run_id``, ``started_at``, ``last_updated``, ``elapsed`` and the like)
are dropped from JSON files before hashing; everything else is hashed as is.

Floating-point bits differ between machines (BLAS kernels), so compare two
fingerprints taken on the same machine::

    git switch --detach BEFORE && python bench/golden_runs.py -o /tmp/before.json
    git switch main && python bench/golden_runs.py -o /tmp/after.json
    python bench/golden_runs.py --compare /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMON = ["--seed", "3", "--eval-every", "700", "--eval-episodes", "2"]
COMMON += ["--checkpoint-freq", "600", "--keep", "2", "--quiet"]

#: name -> argument lists run in order in one root (each a whole command).
SCENARIOS: dict[str, list[list[str]]] = {
    "cartpole-default": [["train", "CartPole-v1", "--steps", "2500", *COMMON]],
    "cartpole-zoo": [["train", "CartPole-v1", "--preset", "zoo", "--steps", "2500", *COMMON]],
    "acrobot-c51": [
        [
            "train",
            "Acrobot-v1",
            "--preset",
            "zoo",
            "--steps",
            "1500",
            *COMMON,
            "--set",
            "distributional=c51",
            "v_min=-100",
            "v_max=0",
        ],
    ],  # fmt: skip
    "native-4env": [["train", "CartPole-v1", "--num-envs", "4", "--steps", "2400", *COMMON]],
    "gymnasium-vector": [
        ["train", "CartPole-v1", "--gymnasium-env", "--num-envs", "2", "--steps", "1600", *COMMON],
    ],  # fmt: skip
    "two-seeds": [
        [
            "train",
            "CartPole-v1",
            "--seeds",
            "0-1",
            "--workers",
            "2",
            "--steps",
            "1500",
            "--eval-every",
            "700",
            "--eval-episodes",
            "2",
            "--checkpoint-freq",
            "600",
            "--quiet",
        ],
    ],  # fmt: skip
    "resumed": [
        ["train", "CartPole-v1", "--preset", "zoo", "--steps", "1200", *COMMON, "--name", "r"],
        ["resume", "RUN", "--steps", "800", "--quiet"],
    ],
    "tune-trial": [
        [
            "tune",
            "CartPole-v1",
            "--trials",
            "1",
            "--seeds",
            "1",
            "--steps",
            "1500",
            "--workers",
            "1",
            "--evals",
            "2",
            "--eval-episodes",
            "2",
            "--quiet",
            # every searched field fixed: the sampler's stream differs per process
            "--set",
            "batch_size=64",
            "buffer_capacity=10000",
            "hidden_sizes=64,64",
            "double_dqn=true",
            "dueling=false",
            "epsilon_end=0.05",
            "gamma=0.99",
            "learning_rate=0.001",
            "n_step=1",
            "prioritized_replay=false",
            "target_update_freq=500",
            "train_freq=4",
            "min_replay_size=300",
            "epsilon_decay_steps=500",
            "gradient_steps=1",
        ],
    ],  # fmt: skip
}

#: JSON keys whose values are wall-clock times or ids made from them.
CLOCK_KEYS = {
    "run_id", "started_at", "last_updated", "elapsed", "elapsed_s", "wall_s", "seconds",
    "time", "timestamp", "datetime_start", "datetime_complete", "duration", "created_at",
    "steps_per_s", "steps_per_second", "fps", "wall_time", "finished_at", "train_seconds",
}  # fmt: skip


RUN_STAMP = re.compile(r"\d{8}_\d{6}(_\d+)?")


def _scrub(value: object, key: str = "") -> object:
    if isinstance(value, dict):
        return {k: _scrub(v, k) for k, v in value.items() if k not in CLOCK_KEYS}
    if key == "curve":  # [step, reward, seconds] points: the seconds are wall clock
        return [point[:2] for point in value]  # type: ignore[index, union-attr]
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str):  # paths: scratch directory and run timestamps
        return RUN_STAMP.sub("RUN", re.sub(r"/tmp/[^/]+/", "/SCRATCH/", value))
    return value


def _digest(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix in (".json", ".jsonl"):
        lines = data.decode().splitlines() if path.suffix == ".jsonl" else [data.decode()]
        data = "\n".join(json.dumps(_scrub(json.loads(x)), sort_keys=True) for x in lines if x)
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


def _skip(relative: str) -> bool:
    # sqlite studies, locks and logs of wall-clock progress are not run outputs
    return relative.endswith((".db", ".lock", ".log", ".sqlite3")) or "/tensorboard/" in relative


def run_scenario(name: str, root: Path) -> dict[str, str]:
    """Run one scenario's commands in ``root``; digests of every file it wrote."""
    runs, tunes = root / "runs", root / "tunes"
    for args in SCENARIOS[name]:
        if args[0] == "resume":
            (run_dir,) = sorted(p.parent for p in runs.rglob("config.json"))
            args = ["resume", str(run_dir), *args[2:]]
        elif args[0] == "train":
            args = [*args, "--root", str(runs)]
        else:
            args = [*args, "--dir", str(tunes)]
        subprocess.run([sys.executable, "-m", "ember_np", *args], check=True, cwd=root)
    return {
        RUN_STAMP.sub("RUN", str(p.relative_to(root))): _digest(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not _skip(str(p.relative_to(root)))
    }


def fingerprint(names: list[str]) -> dict[str, dict[str, str]]:
    """Every scenario's file digests, keyed by scenario then by path."""
    out = {}
    for name in names:
        with tempfile.TemporaryDirectory() as scratch:
            out[name] = run_scenario(name, Path(scratch))
        print(f"{name}: {len(out[name])} files", file=sys.stderr)
    return out


def compare(before: dict, after: dict) -> list[str]:
    """One line per scenario or file that differs; empty when all agree."""
    problems = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name, {}), after.get(name, {})
        for path in sorted(set(a) | set(b)):
            if a.get(path) != b.get(path):
                problems.append(f"{name}: {path} differs")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", help="write the fingerprint JSON here")
    parser.add_argument("--only", nargs="+", choices=sorted(SCENARIOS), help="some scenarios")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        problems = compare(before, after)
        print("\n".join(problems) or f"identical: {sum(map(len, before.values()))} files")
        return 1 if problems else 0
    result = json.dumps(fingerprint(args.only or list(SCENARIOS)), indent=1, sort_keys=True)
    if args.output:
        Path(args.output).write_text(result + "\n")
    else:
        print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
