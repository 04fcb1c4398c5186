"""What each component of a ``rainbow`` preset contributes: the preset with each one removed.

Usage::

    python bench/ablation.py --envs CartPole-v1 --seeds 20 --workers 2
    python bench/ablation.py --report      # bench/results_ablation.md from the saved results
    python bench/ablation.py --envs CartPole-v1 --scheduler tcp://HOST:8786   # on a Dask cluster

For each env, the ``rainbow`` preset and, for every component it uses, the
preset with that component removed (n-step -> 1, prioritized replay off, a
distributional head (C51, QR-DQN) -> the plain Q head, dueling off, LayerNorm
off, learning-rate annealing off, double DQN off, soft target updates -> the
hard sync every ``HARD_SYNC`` steps, noisy networks off -> epsilon-greedy,
``NOISY_OFF_EPSILON`` unless the preset explores with epsilon too). Every variant
trains the same seeds (default 0-19) through the multi-seed runner on the
compiled env, and its final policy is evaluated as in bench/learning.py: 20
fresh greedy episodes per seed (reset seeds 10,000 + 100 * seed, ...), then
IQM [95% CI] over seeds. The full preset's row is read from
``bench/results/learning_ember_np-rainbow_<env>.json`` when that run used the
same config, steps and seeds (periodic evaluations do not change training, so
its final policies are the ones this script would train), else trained here.

Results: ``bench/results/ablation_<env>.json`` (per variant: the overrides and
per-seed finals; a few KB) and the table ``bench/results_ablation.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from learning import (  # noqa: E402
    FINAL_EPISODES,
    REFERENCE,
    changed_since,
    ci_text,
    cluster_client,
    evaluate,
    final_eval_seed,
    load_average,
    result_path,
)

RESULTS = HERE / "results"
DEFAULT_ENVS = "CartPole-v1,Acrobot-v1,MountainCar-v0"
HARD_SYNC = 500  # "soft updates off": a hard target sync every this many env steps
#: "noisy off" of a preset that explores by its noise alone (epsilon 0): the zoo
#: presets' epsilon-greedy schedule instead (1.0 to 0.01 over 10% of 100k steps).
NOISY_OFF_EPSILON = {"epsilon_start": 1.0, "epsilon_end": 0.01, "epsilon_decay_steps": 10_000}

#: (label, the field, its value in the preset when the component is used, its "off" value)
COMPONENTS = (
    ("n-step -> 1", "n_step", lambda v: v > 1, 1),
    ("PER off", "prioritized_replay", bool, False),
    ("distributional off", "distributional", lambda v: v is not None, None),
    ("dueling off", "dueling", bool, False),
    ("LayerNorm off", "layer_norm", bool, False),
    ("lr annealing off", "learning_rate_end", lambda v: v is not None, None),
    ("double DQN off", "double_dqn", bool, False),
)


def variants(config: Any) -> list[tuple[str, dict[str, Any]]]:
    """The full preset and one variant per component ``config`` uses (overrides)."""
    out: list[tuple[str, dict[str, Any]]] = [("rainbow (all)", {})]
    for label, name, used, off in COMPONENTS:
        if hasattr(config, name) and used(getattr(config, name)):
            out.append((label, {name: off}))
    if config.tau < 1.0:
        out.append(("soft target off", {"tau": 1.0, "target_update_freq": HARD_SYNC}))
    if getattr(config, "noisy", False):
        explores = config.epsilon_start > 0.0 or config.epsilon_end > 0.0
        out.append(("noisy off", {"noisy": False, **({} if explores else NOISY_OFF_EPSILON)}))
    return out


def train_variant(
    env_id: str, config: Any, steps: int, seeds: list[int], workers: int, client: Any = None
) -> dict[str, Any]:
    """Train ``seeds`` of one config (on ``workers`` processes, or the cluster of the Dask
    ``client``); each seed's final policy on 20 fresh episodes."""
    from ember_np import DqnPolicy
    from ember_np.training.multiseed import train_seeds
    from ember_np.training.spec import RunSpec

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = RunSpec(f"ember_np/{env_id}", config=config, steps=steps, eval_every=steps + 1,
                      eval_episodes=1, checkpoint_freq=steps, keep=0)  # fmt: skip
        result = train_seeds(
            run, seeds, workers=None if client else workers, root=tmp, version="ablation",
            progress=sys.stderr.isatty(), scheduler=client,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        finals = {}
        for r in result.runs:
            policy = DqnPolicy.load(r.run_dir / "checkpoints" / "latest.npz")
            returns = evaluate(policy, env_id, FINAL_EPISODES, final_eval_seed(r.seed))
            finals[r.seed] = round(statistics.fmean(returns), 2)
    return {"finals": [finals[s] for s in sorted(finals)], "seeds": sorted(finals),
            "failed": result.failed, "wall_seconds": round(wall, 1)}  # fmt: skip


def same_config(saved: dict | None, config: Any) -> bool:
    """Whether a saved ``DqnConfig.to_dict()`` is ``config``, reading it with today's
    defaults for fields added since it was saved (e.g. ``action_masks``)."""
    from ember_np import DqnConfig

    return saved is not None and DqnConfig.from_dict(saved) == config


def reused_full_row(
    results: Path, env_id: str, config: Any, steps: int, seeds: list[int]
) -> dict | None:
    """The full preset's finals from bench/learning.py's rainbow run, if it trained this
    config for these steps on (at least) these seeds: the same runs, so the same finals."""
    path = result_path(results, "ember_np", env_id, "rainbow")
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    final = {r["seed"]: r["final"] for r in data["runs"]}
    if (
        not same_config(data.get("config"), config)
        or data["steps"] != steps
        or set(seeds) - set(final)
    ):
        return None
    wall = data["wall_seconds"] * len(seeds) / len(final)  # its share of that run's wall time
    return {"finals": [round(final[s], 2) for s in seeds], "seeds": seeds, "failed": [],
            "wall_seconds": round(wall, 1), "from": path.name}  # fmt: skip


def ablate(env_id: str, args: argparse.Namespace) -> dict:
    """Train (or reuse) every variant of ``env_id``'s rainbow preset; saves as it goes.
    ``args``: the command line's seeds, workers, only, results and steps."""
    from ember_np.presets import get_preset

    preset = get_preset("rainbow", env_id)
    seeds, steps = list(range(args.seeds)), args.steps or preset.steps
    base = preset.config_for(steps)  # as `ember-np train --steps`: schedules scaled
    path = args.results / f"ablation_{env_id}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    if not same_config(data.get("config"), base) or (
        (data.get("seeds"), data.get("steps")) != (seeds, steps)
    ):
        # results of another preset: start anew
        data = {"env_id": env_id, "steps": steps, "seeds": seeds,
                "config": base.to_dict(), "variants": {}}  # fmt: skip
    for label, overrides in variants(base):
        if args.only and label not in args.only:
            continue
        load_before = load_average()
        row = None
        if not overrides:
            row = reused_full_row(args.results, env_id, base, steps, seeds)
        if row is None:
            config = base.replace(**overrides)
            row = train_variant(env_id, config, steps, seeds, args.workers, args.client)
        row.update(overrides=overrides, workers=args.workers,
                   load=f"{load_before} before, {load_average()} after")  # fmt: skip
        data["variants"][label] = row
        row["command"] = "python bench/ablation.py " + " ".join(sys.argv[1:])
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{env_id} {label}: final IQM {ci_text(row['finals'])}, "
              f"{row['wall_seconds']:.0f} s", file=sys.stderr)  # fmt: skip
    return data


def report(results: Path, out: Path) -> str:
    lines = [
        "Command: python bench/ablation.py --envs ENV --seeds N --workers 2 (per env, as "
        "recorded below); python bench/ablation.py --report",
        "",
        "Each env's `rainbow` preset, then the preset with one component removed. Cells: IQM "
        f"[95% bootstrap CI] over seeds of each seed's final policy's mean return on "
        f"{FINAL_EPISODES} fresh greedy episodes (bench/learning.py's protocol); 'solved': "
        "seeds at or above the env's threshold. 'soft target off': tau 1 with a hard sync every "
        f"{HARD_SYNC} steps.",
        "",
        "| env (budget, seeds) | variant | final IQM [95% CI] | solved (final >= threshold) | "
        "change of IQM | wall time |",
        "|---|---|---|---|---|---|",
    ]
    from ember_np.stats import iqm

    notes = []
    for env_id in REFERENCE:
        path = results / f"ablation_{env_id}.json"
        if not path.exists():
            if env_id in DEFAULT_ENVS.split(","):
                notes.append(f"- {env_id}: no ablation run (compute ran out)")
            continue
        data = json.loads(path.read_text())
        full = data["variants"].get("rainbow (all)")
        changed = changed_since("rainbow", env_id, data["config"], data["steps"])
        if changed:
            notes.append(f"- {env_id}: these rows are of an earlier `rainbow` preset, not "
                         f"re-run since its {', '.join(changed)} changed")  # fmt: skip
        earlier = " (earlier preset)" if changed else ""
        for label, row in data["variants"].items():
            finals = row["finals"]
            solved = sum(f >= REFERENCE[env_id]["bar"] for f in finals)
            change = f"{iqm(finals) - iqm(full['finals']):+.1f}" if full and row is not full else ""
            lines.append(
                f"| {env_id} ({data['steps']:,}, {len(finals)}){earlier} | {label} "
                f"| {ci_text(finals)} "
                f"| {solved} / {len(finals)} | {change} | {row['wall_seconds']:.0f} s "
                f"({row['workers']} workers) |"
            )
            if row.get("failed"):
                notes.append(f"- {env_id} {label}: seeds {row['failed']} did not finish")
        commands = sorted({v.get("command", data.get("command", "?"))
                           for v in data["variants"].values()})  # fmt: skip
        notes.append(f"- {env_id}: commands: {'; '.join(commands)}; load (1/5/15-min) per "
                     f"variant: " + "; ".join(f"{k}: {v['load']}"
                                              for k, v in data["variants"].items()))  # fmt: skip
        from ember_np.dqn.config import DqnConfig

        planned = [label for label, _ in variants(DqnConfig.from_dict(data["config"]))]
        missing = [label for label in planned if label not in data["variants"]]
        if missing:
            notes.append(f"- {env_id}: not run (compute ran out): {', '.join(missing)}")
        if full and full.get("from"):
            notes.append(f"- {env_id}: the full preset's row is bench/results/{full['from']}")
    table = "\n".join(lines + [""] + notes)
    out.write_text(table + "\n")
    return table


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--envs", default=DEFAULT_ENVS)
    p.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 (default 20)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--only", nargs="+", help="variant labels to (re)train (default: all)")
    p.add_argument("--steps", type=int, help="instead of the preset's budget (a quick check)")
    p.add_argument("--results", type=Path, default=RESULTS, help="where the JSON files go")
    p.add_argument("--report", action="store_true", help="write the table from saved results")
    p.add_argument("--out", type=Path, default=HERE / "results_ablation.md")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="train the seeds on this Dask cluster (tcp://HOST:8786), one task per "
                   "seed; --workers is then the cluster's thread count")  # fmt: skip
    args = p.parse_args()
    if args.report:
        print(report(args.results, args.out))
        return
    args.client = cluster_client(args)
    args.results.mkdir(parents=True, exist_ok=True)
    for env_id in [e for e in args.envs.split(",") if e]:
        ablate(env_id, args)


if __name__ == "__main__":
    main()
