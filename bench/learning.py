"""Learning results: ember_np's presets and SB3 with the RL Zoo's on 20 seeds, as IQM [95% CI].

Usage::

    python bench/learning.py --library ember_np --envs CartPole-v1,Acrobot-v1,MountainCar-v0
    python bench/learning.py --library ember_np --preset rainbow   # ember_np's own presets
    nice -n 10 python bench/learning.py --library sb3 --envs CartPole-v1
    python bench/learning.py --algo ppo --preset ember --envs CartPole-v1   # PPO
    nice -n 10 python bench/learning.py --algo ppo --library sb3 --envs CartPole-v1
    python bench/learning.py --report        # table + curves from the saved results
    python bench/learning.py --library ember_np --scheduler tcp://HOST:8786   # on a Dask cluster

Protocol, the same for both libraries: each seed trains with the preset's
config for the preset's step budget, one process per seed at a time on
``--workers`` processes with one BLAS / torch thread each; a greedy
evaluation of 10 episodes every tenth of the budget (the best one kept as
``best.npz``); then the final policy and the best one are each evaluated
greedily on the same 20 fresh episodes (seeds 10,000 + 100 * seed ...).
ember_np trains through its multi-seed runner
(:func:`ember_np.training.multiseed.train_seeds`, the code behind
``ember-np train ENV --seeds 20``) on gymnasium's env (with ``--num-envs N``:
on N copies of its compiled twin, ``ember_np/<env>``, bit for bit gymnasium's
dynamics, in the compiled vector loop), with the preset ``--preset`` names
(``zoo``, the default, or ``rainbow``), on ``--workers`` local processes or,
with ``--scheduler``, as one task per seed on that Dask cluster (the same runs
either way); SB3 always gets the Zoo's own arguments (the ``zoo`` preset's
``sb3_kwargs``) on gymnasium's env, one subprocess per seed.

Each (library, preset, env) writes
``bench/results/learning_<library>-<preset>_<env>.json`` (SB3:
``learning_sb3_<env>.json``)
(per-seed final and best means, the evaluation curve with the wall time at
each point, and the wall time for all seeds: a few KB). ``--report`` turns
the saved files into ``bench/results_learning.md`` (a row per library and
preset: IQM [95% CI] of the final and best policy, P(row > SB3 zoo) with its
CI, wall time for all seeds, time to solve CartPole) and
``bench/learning_curves.png``; PPO's rows (``--algo ppo``, ``bench/learning_ppo.py``)
go to ``bench/results_learning_ppo.md`` and ``bench/learning_curves_ppo.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

#: Bars of issue 5 (LunarLander-v3: 200, the score at which gymnasium calls it solved,
#: issue 26's bar; issue 5's was 150), and the published figures of rl-baselines3-zoo's
#: benchmark and CleanRL's DQN report.
REFERENCE = {
    "CartPole-v1": {"bar": 475.0, "zoo": "500.0 ± 0.0", "cleanrl": "488.7 ± 16.1"},
    "Acrobot-v1": {"bar": -90.0, "zoo": "-76.6 ± 11.8", "cleanrl": "-91.5 ± 7.2"},
    "MountainCar-v0": {"bar": -120.0, "zoo": "-100.8 ± 9.9", "cleanrl": "-195.0 ± 8.5"},
    "LunarLander-v3": {"bar": 200.0, "zoo": "154.4 ± 79.2 (v2)", "cleanrl": "n/a"},
}
DEFAULT_ENVS = "CartPole-v1,Acrobot-v1,MountainCar-v0"
FINAL_EPISODES = 20
EVAL_EPISODES = 10
SOLVED = {"CartPole-v1": 475.0}  # "time to solve": IQM of the greedy evaluations reaches this


def evaluate(policy, env_id: str, episodes: int, seed: int) -> list[float]:
    """Undiscounted returns of ``episodes`` greedy episodes (reset seeds seed, seed + 1, ...)."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def final_eval_seed(seed: int) -> int:
    return 10_000 + 100 * seed  # episodes never seen in training


# -- ember_np: the multi-seed runner ---------------------------------------------------


def run_ember(
    env_id: str,
    seeds: list[int],
    workers: int,
    steps: int,
    runs_root: Path | None = None,
    collect: bool = False,
    preset_name: str = "zoo",
    client=None,
    num_envs: int | None = None,
    algo: str = "dqn",
) -> dict:
    """Train (or, with a ``runs_root`` holding this env's multi-seed run, finish) the
    seeds of ``preset_name``; then evaluate every finished seed's final and best
    policy. ``collect``: evaluate the seeds finished so far, train nothing.
    ``client``: a Dask client whose cluster trains the seeds (``workers``
    then only spreads the seeds' times in an estimate).
    ``num_envs``: train on ``num_envs`` copies of the compiled env (``ember_np/<env>``,
    the compiled vector loop; 1: the compiled single env), same transitions.
    ``algo="ppo"``: PPO's preset, on its ``num_envs`` (default the preset's) copies of
    the compiled env where one exists (:func:`learning_ppo.ppo_training_env`)."""
    from ember_np.algorithms import get_algorithm
    from ember_np.training.multiseed import load_multiseed, resume_seeds, train_seeds
    from ember_np.training.spec import RunSpec

    algorithm = get_algorithm(algo)
    preset = algorithm.preset(preset_name, env_id)
    config = preset.config_for(steps)  # as `ember-np train --steps`: schedules scaled
    version = "bench" if preset_name == "zoo" else f"bench-{preset_name}"
    train_env = env_id
    vector: dict = {}
    if algo == "ppo":
        from learning_ppo import ppo_training_env

        train_env, vector, version = ppo_training_env(env_id, preset, preset_name, num_envs)
    elif num_envs is not None:
        train_env = f"ember_np/{env_id}"
        version += f"-n{num_envs}"
        vector = {"num_envs": num_envs}
    with tempfile.TemporaryDirectory() as tmp:
        root = runs_root or Path(tmp)
        existing = sorted(root.glob(f"{env_id}/{version}/*/seeds.json"))
        t0 = time.perf_counter()
        if existing:  # an interrupted run: finish it (or only read it)
            parent = existing[-1].parent
            result = (
                load_multiseed(parent)
                if collect
                else resume_seeds(
                    parent,
                    None if client else workers,
                    progress=sys.stderr.isatty(),
                    scheduler=client,
                )
            )
        elif collect:
            raise SystemExit(f"no multi-seed run of {env_id} under {root} to collect")
        else:
            run = RunSpec(train_env, algo, preset=preset_name, config=config, steps=steps,
                          eval_every=steps // 10, eval_episodes=EVAL_EPISODES,
                          checkpoint_freq=steps, keep=1, **vector)  # fmt: skip
            result = train_seeds(
                run, seeds, workers=None if client else workers, root=root, name=env_id,
                version=version, progress=sys.stderr.isatty(), scheduler=client,
            )  # fmt: skip
        wall = time.perf_counter() - t0
        per_seed = []
        for r in result.runs:
            ckpt = r.run_dir / "checkpoints"
            load = algorithm.load_policy
            final = evaluate(load(ckpt / "latest.npz"), env_id, FINAL_EPISODES,
                             final_eval_seed(r.seed))  # fmt: skip
            best = evaluate(load(ckpt / "best.npz"), env_id, FINAL_EPISODES,
                            final_eval_seed(r.seed))  # fmt: skip
            per_seed.append(
                {
                    "seed": r.seed,
                    "final": statistics.fmean(final),
                    "best": statistics.fmean(best),
                    "curve": [[s, round(m, 2), round(t, 2)] for s, m, t in r.curve],
                    "train_seconds": round(r.train_seconds, 2),
                }
            )
    out = {"wall_seconds": round(wall, 1), "runs": per_seed, "missing_seeds": result.failed,
           "config": config.to_dict()}  # fmt: skip
    if algo != "dqn":  # the env the seeds trained on, and how many copies
        out.update(algo=algo, train_env=train_env, num_envs=vector.get("num_envs", 1))
    if existing:  # trained in more than one call: the seeds' own times, spread on the workers
        out["wall_seconds"] = round(sum(r["train_seconds"] for r in per_seed) / workers, 1)
        out["wall_estimated"] = True
    return out


# -- SB3: the same protocol, one subprocess per seed -----------------------------------


def sb3_seed(env_id: str, seed: int, steps: int) -> dict:
    """One seed of SB3's DQN with the Zoo's arguments (runs in its own process)."""
    import copy

    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger

    from ember_np.presets import get_preset

    torch.set_num_threads(1)
    preset = get_preset("zoo", env_id)
    chunk = steps // 10
    curve: list[list[float]] = []
    best: dict = {"mean": -float("inf"), "state": None}

    class Greedy:
        def __init__(self, policy):
            self.policy = policy

        def act(self, obs):
            return int(self.policy.predict(obs, deterministic=True)[0])

    t0 = time.perf_counter()

    class PeriodicEval(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % chunk == 0:
                mean = statistics.fmean(
                    evaluate(Greedy(self.model.policy), env_id, EVAL_EPISODES, 5_000 + seed)
                )
                curve.append([self.num_timesteps, round(mean, 2),
                              round(time.perf_counter() - t0, 2)])  # fmt: skip
                if mean > best["mean"]:
                    best["mean"] = mean
                    best["state"] = copy.deepcopy(self.model.policy.state_dict())
            return True

    model = DQN("MlpPolicy", gym.make(env_id), seed=seed, device="cpu", verbose=0,
                **preset.sb3_kwargs)  # fmt: skip
    # A logger with no outputs: SB3's default makes an empty /tmp/SB3-<date> per run.
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(steps, callback=PeriodicEval())
    train_seconds = time.perf_counter() - t0
    final = evaluate(Greedy(model.policy), env_id, FINAL_EPISODES, final_eval_seed(seed))
    model.policy.load_state_dict(best["state"])
    best_returns = evaluate(Greedy(model.policy), env_id, FINAL_EPISODES, final_eval_seed(seed))
    return {
        "seed": seed,
        "final": statistics.fmean(final),
        "best": statistics.fmean(best_returns),
        "curve": curve,
        "train_seconds": round(train_seconds, 2),
    }


def run_sb3(
    env_id: str,
    seeds: list[int],
    workers: int,
    steps: int,
    runs_root: Path | None = None,
    collect: bool = False,
    algo: str = "dqn",
    earlier: list[dict] | None = None,
) -> dict:
    """Every seed in its own subprocess, ``workers`` at a time. With ``runs_root``, each
    seed's result is kept there as it finishes and a later call skips it; ``collect``
    gathers the seeds finished so far and trains nothing. ``algo``: SB3's DQN or PPO.
    ``earlier``: seeds' results finished before (:func:`earlier_runs`), taken as
    finished too (written to ``runs_root`` when it does not hold them)."""
    # One BLAS / OpenMP thread per process: the workers share the cores.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        done_dir = (runs_root or Path(tmp)) / ("sb3" if algo == "dqn" else f"sb3-{algo}") / env_id
        done_dir.mkdir(parents=True, exist_ok=True)
        for r in earlier or []:
            path = done_dir / f"seed_{r['seed']}.json"
            if r["seed"] in seeds and not path.exists():
                path.write_text(json.dumps(r))

        def one(seed: int) -> dict | None:
            path = done_dir / f"seed_{seed}.json"
            if path.exists():
                return json.loads(path.read_text())
            if collect:
                return None
            out = subprocess.run(
                [sys.executable, __file__, "--sb3-worker", env_id, str(seed), str(steps),
                 "--algo", algo],
                capture_output=True, text=True, env=env,
            )  # fmt: skip
            if out.returncode != 0:
                raise SystemExit(f"SB3 {env_id} seed {seed} failed:\n{out.stderr[-3000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            path.write_text(json.dumps(r))
            print(f"sb3 {env_id} seed {seed}: final {r['final']:.1f}, best {r['best']:.1f}, "
                  f"{r['train_seconds']:.0f} s", file=sys.stderr)  # fmt: skip
            return r

        already = sum((done_dir / f"seed_{s}.json").exists() for s in seeds)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            runs = [r for r in pool.map(one, seeds) if r is not None]
    out = {"wall_seconds": round(time.perf_counter() - t0, 1), "runs": runs,
           "missing_seeds": [s for s in seeds if s not in {r["seed"] for r in runs}]}  # fmt: skip
    if already or collect:  # trained in more than one call: the seeds' own times, spread
        out["wall_seconds"] = round(sum(r["train_seconds"] for r in runs) / workers, 1)
        out["wall_estimated"] = True
    return out


# -- the report -------------------------------------------------------------------------


#: The rows of the report: (library, preset), SB3 (always the Zoo's arguments) last.
ROWS = (("ember_np", "rainbow"), ("ember_np", "zoo"), ("sb3", "zoo"))


#: Rows of the table only (not the plot): the rainbow preset on the compiled env,
#: one env and N envs stepped together (issue 25), the same transitions.
VECTOR_ROWS = (("ember_np", "rainbow-n1"), ("ember_np", "rainbow-n4"))


def preset_key(preset: str, num_envs: int | None) -> str:
    """The result's preset name: ``rainbow``, or ``rainbow-n4`` for 4 compiled envs."""
    return preset if num_envs is None else f"{preset}-n{num_envs}"


def split_preset_key(key: str) -> tuple[str, int | None]:
    """The inverse of :func:`preset_key`: ``("rainbow", 4)`` for ``rainbow-n4``,
    ``(key, None)`` for a key without a ``-n<digits>`` suffix."""
    match = re.fullmatch(r"(.+)-n(\d+)", key)
    return (key, None) if match is None else (match[1], int(match[2]))


def earlier_runs(path: Path, steps: int) -> list[dict]:
    """The seeds' results in the result file ``path`` when it holds a run of ``steps``
    steps, else []: a long SB3 row (10 seeds of LunarLander-v3, hours of both cores)
    can then be finished over several sessions, on other machines, from its committed
    partial file."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return list(data["runs"]) if data.get("steps") == steps else []


def result_path(results: Path, library: str, env_id: str, preset: str = "zoo") -> Path:
    """Where one (library, preset, env) result goes; SB3 has the zoo preset (DQN's,
    ``learning_sb3_<env>.json``) and ``ppo`` (PPO's zoo, ``learning_sb3-ppo_<env>.json``)."""
    if library == "sb3":
        name = "sb3" if preset == "zoo" else f"sb3-{preset}"
        return results / f"learning_{name}_{env_id}.json"
    return results / f"learning_{library}-{preset}_{env_id}.json"


def read_result(results: Path, library: str, env_id: str, preset: str) -> dict | None:
    """A saved result, or None."""
    path = result_path(results, library, env_id, preset)
    return json.loads(path.read_text()) if path.exists() else None


def row_name(library: str, preset: str) -> str:
    base, n = split_preset_key(preset)
    if n is not None:
        return f"{library} {base}, compiled env x {n}"
    return f"{library} {preset}"


def changed_since(preset: str, env_id: str, config: dict, steps: int | None = None) -> list[str]:
    """The fields where ``config`` (as a result file recorded it) differs from
    ``env_id``'s preset ``preset`` today, for a run of ``steps`` (None: its budget): a
    result kept, not re-run, after the preset changed."""
    from ember_np.dqn.config import DqnConfig
    from ember_np.presets import get_preset

    today = get_preset(preset, env_id)
    now = today.config_for(steps or today.steps).to_dict()
    then = DqnConfig.from_dict(config).to_dict()
    return sorted(k for k in now if now[k] != then.get(k))


def earlier_preset(library: str, preset: str, env_id: str, data: dict) -> str:
    """``""``, or a note that ``data`` trained an earlier version of the preset."""
    if library != "ember_np" or "config" not in data:
        return ""
    changed = changed_since(split_preset_key(preset)[0], env_id, data["config"], data.get("steps"))
    return f", earlier preset: {', '.join(changed)} since changed" if changed else ""


def ci_text(values: list[float]) -> str:
    from ember_np.stats import bootstrap_ci, iqm

    low, high = bootstrap_ci(values, "iqm")
    return f"{iqm(values):.1f} [{low:.1f}, {high:.1f}]"


def curve_arrays(data: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps (points,), mean eval reward (seeds, points), elapsed seconds (seeds, points)."""
    curves = [r["curve"] for r in data["runs"]]
    n = min(len(c) for c in curves)
    arr = np.array([c[:n] for c in curves], dtype=np.float64)
    return arr[0, :, 0], arr[:, :, 1], arr[:, :, 2]


def time_to_solve(data: dict, threshold: float) -> str:
    """Wall time (for all seeds) until the IQM over seeds of the greedy evaluations
    first reaches ``threshold``: the step of that evaluation, and the wall time for
    all seeds scaled by the seeds' mean share of their training time spent by then."""
    from ember_np.stats import iqm

    steps, rewards, elapsed = curve_arrays(data)
    curve = [iqm(rewards[:, i]) for i in range(steps.size)]
    for i, value in enumerate(curve):
        if value >= threshold:
            share = float(np.mean(elapsed[:, i] / elapsed[:, -1]))
            return f"{share * data['wall_seconds']:.0f} s (step {int(steps[i]):,})"
    top = int(np.argmax(curve))
    return (
        f"not reached in {int(steps[-1]):,} steps (highest IQM {curve[top]:.1f}, step "
        f"{int(steps[top]):,})"
    )


def table_row(env_id: str, name: str, d: dict, target: float, theirs: dict | None) -> str:
    """One row of a learning table: the result ``d``'s final and best IQM [CI], the seeds
    whose final policy reaches ``target``, P(> ``theirs``) (the SB3 row's result; None:
    "-") and the wall time."""
    from ember_np.stats import probability_of_improvement

    finals = [r["final"] for r in d["runs"]]
    row = [env_id, f"{name} ({d['steps']:,})", str(len(d["runs"])), ci_text(finals),
           ci_text([r["best"] for r in d["runs"]]),
           f"{sum(f >= target for f in finals)} / {len(finals)}"]  # fmt: skip
    if theirs is not None:
        p, (low, high) = probability_of_improvement(finals, [r["final"] for r in theirs["runs"]])
        row.append(f"{p:.2f} [{low:.2f}, {high:.2f}]")
    else:
        row.append("-")
    row.append(f"{'~' if d.get('wall_estimated') else ''}{d['wall_seconds']:.0f} s "
               f"({d['workers']} workers)")  # fmt: skip
    return "| " + " | ".join(row) + " |"


def report(results: Path, out: Path, plot_path: Path) -> str:
    found = {(lib, preset, env): data for lib, preset in ROWS + VECTOR_ROWS for env in REFERENCE
             if (data := read_result(results, lib, env, preset)) is not None}  # fmt: skip
    lines = [
        "Commands: python bench/learning.py --library ember_np --preset rainbow --seeds 20 "
        "--workers 2; python bench/learning.py --library ember_np --seeds 20 --workers 2 (zoo); "
        "nice -n 10 python bench/learning.py --library sb3 --seeds 20 --workers 2 "
        "(--envs as below); python bench/learning.py --report",
        "",
        f"IQM [95% stratified-bootstrap CI] over seeds of each seed's mean greedy return on "
        f"{FINAL_EPISODES} fresh episodes: 'final' is the policy at the end of the budget, "
        "'best' best.npz (the best of ten periodic 10-episode evaluations). 'solved': seeds "
        "whose final policy reaches the env's threshold. P(> SB3 zoo): probability that a random "
        "seed of the row's final policy beats a random SB3 seed's (ties count half), with its "
        "95% CI. ember_np's presets: `rainbow` (this project's, chosen on tuning seeds "
        "1000-1019, never on these), `zoo` (the RL Zoo's hyperparameters, as SB3 gets them). "
        "Wall time: all seeds, on the workers shown. 'compiled env x N': the same "
        "preset and transitions on ember_np's compiled env, N copies stepped together in the "
        "compiled vector loop (x 1: the compiled single env; the plain rows train on "
        "gymnasium's Python env), `--num-envs N`.",
        "",
        "| env | library, preset (budget) | seeds | final | best | solved (final >= threshold) "
        "| P(> SB3 zoo), final | wall time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for env_id in REFERENCE:
        theirs = found.get(("sb3", "zoo", env_id))
        for lib, preset in ROWS[:1] + VECTOR_ROWS + ROWS[1:]:
            d = found.get((lib, preset, env_id))
            if d is None:
                continue
            name = row_name(lib, preset) + earlier_preset(lib, preset, env_id, d)
            lines.append(table_row(env_id, name, d, REFERENCE[env_id]["bar"],
                                   theirs if lib != "sb3" else None))  # fmt: skip
    lines.append("")
    for env_id, threshold in SOLVED.items():
        parts = [f"{row_name(lib, preset)}: "
                 f"{time_to_solve(found[(lib, preset, env_id)], threshold)}"
                 for lib, preset in ROWS[:1] + VECTOR_ROWS + ROWS[1:]
                 if (lib, preset, env_id) in found]  # fmt: skip
        if parts:
            lines.append(f"Time to solve {env_id} (IQM of greedy evaluations >= {threshold:g}, "
                         f"wall time for all seeds): " + "; ".join(parts))  # fmt: skip
    missing = [f"{row_name(lib, preset)} {env}" for env in DEFAULT_ENVS.split(",")
               for lib, preset in ROWS if (lib, preset, env) not in found]  # fmt: skip
    if missing:
        lines.append(f"Not run: {', '.join(missing)}.")
    for (lib, preset, env_id), d in sorted(found.items()):
        if d.get("missing_seeds"):
            n = len(d["runs"])
            lines.append(f"- {row_name(lib, preset)} {env_id}: partial, {n} of "
                         f"{n + len(d['missing_seeds'])} seeds finished (not run: seeds "
                         f"{d['missing_seeds']})")  # fmt: skip
    for (lib, preset, env_id), d in sorted(found.items()):
        lines.append(f"- {row_name(lib, preset)} {env_id}: machine load during the run: "
                     f"{d.get('load', '?')}; command: {d.get('command', '?')}")  # fmt: skip
    if plot(found, plot_path):
        lines += ["", f"IQM learning curves with 95% CI bands: {plot_path.name}"]
    table = "\n".join(lines)
    out.write_text(table + "\n")
    from learning_ppo import ppo_report

    # PPO's rows: a table of their own, in OUT_ppo.md beside OUT (curves: PLOT_ppo.png)
    ppo = ppo_report(results, plot_path.with_name(plot_path.stem + "_ppo.png"))
    if ppo:
        out.with_name(out.stem + "_ppo.md").write_text("\n".join(ppo) + "\n")
        table += "\n\n" + "\n".join(ppo)
    return table


def plot(found: dict, path: Path, rows: tuple = ROWS, targets: dict | None = None) -> bool:
    """IQM curves of ``rows`` per env into ``path``; a dashed line at each env's
    ``targets`` value (default: REFERENCE's thresholds). False: nothing to draw."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from ember_np.stats import iqm_curve

    envs = [e for e in REFERENCE if any(key[2] == e for key in found)]
    if not envs:
        return False
    fig, axes = plt.subplots(1, len(envs), figsize=(4.5 * len(envs), 3.6), squeeze=False)
    for ax, env_id in zip(axes[0], envs):
        for (lib, preset), color in zip(rows, ("C2", "C0", "C1")):
            if (lib, preset, env_id) not in found:
                continue
            steps, rewards, _ = curve_arrays(found[(lib, preset, env_id)])
            mid, low, high = iqm_curve(rewards, reps=2_000)
            ax.plot(steps, mid, color=color,
                    label=f"{row_name(lib, preset)} ({rewards.shape[0]} seeds)")  # fmt: skip
            ax.fill_between(steps, low, high, color=color, alpha=0.25, lw=0)
        if targets is None:
            ax.axhline(REFERENCE[env_id]["bar"], color="r", ls="--", lw=1, label="bar")
        else:
            ax.axhline(targets[env_id], color="r", ls="--", lw=1, label="target")
        ax.set_title(env_id)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")  # each panel's own seed counts
    axes[0][0].set_ylabel("IQM of greedy eval reward, 95% CI")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    return True


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def cluster_client(args: argparse.Namespace):
    """``--scheduler``'s Dask client (None without it); ``args.workers`` becomes the cluster's
    thread count. Exits with one line when the scheduler does not answer."""
    if args.scheduler is None:
        return None
    if getattr(args, "library", "ember_np") != "ember_np":
        raise SystemExit("--scheduler trains ember_np's seeds; SB3 runs on --workers processes")
    from ember_np.training.cluster import ClusterError, connect

    try:
        client = connect(args.scheduler)
    except ClusterError as exc:
        raise SystemExit(f"--scheduler {args.scheduler}: {exc}") from None
    args.workers = sum(client.nthreads().values()) or args.workers
    return client


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--envs", default=DEFAULT_ENVS)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--library", choices=["ember_np", "sb3"], default="ember_np",
                   help="sb3 needs the bench extra")  # fmt: skip
    p.add_argument("--algo", choices=["dqn", "ppo"], default="dqn",
                   help="the algorithm, for both libraries (default dqn)")  # fmt: skip
    p.add_argument("--preset", default="zoo",
                   help="ember_np's preset: zoo (default) or rainbow (dqn), zoo or ember "
                   "(ppo); SB3 always gets the Zoo's")  # fmt: skip
    p.add_argument(
        "--num-envs", type=int,
        help="ember_np: train on N copies of the compiled env (ember_np/<env>, the compiled "
        "vector loop; 1: the compiled single env), the row 'compiled env x N'",
    )  # fmt: skip
    p.add_argument(
        "--steps",
        type=int,
        help="train this many steps instead of each preset's budget (a quick check)",
    )
    p.add_argument("--results", type=Path, default=RESULTS, help="where the JSON files go")
    p.add_argument("--report", action="store_true", help="write the table from saved results")
    p.add_argument("--out", type=Path, default=HERE / "results_learning.md")
    p.add_argument("--plot", type=Path, default=HERE / "learning_curves.png")
    p.add_argument(
        "--runs-root",
        type=Path,
        help="keep the runs (ember_np) or per-seed results (sb3) here (default: a temporary "
        "directory); a run of the env already there is finished, not restarted (sb3: so "
        "is a seed in the env's result file, of the same steps)",
    )
    p.add_argument(
        "--collect",
        action="store_true",
        help="with --runs-root: report the seeds finished so far, train nothing",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="ember_np: train the seeds on this Dask cluster (tcp://HOST:8786), one task per "
        "seed; --workers is then the cluster's thread count",
    )
    p.add_argument("--sb3-worker", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sb3_worker:
        env_id, seed, steps = args.sb3_worker
        if args.algo == "ppo":
            from learning_ppo import sb3_ppo_seed as worker
        else:
            worker = sb3_seed
        print(json.dumps(worker(env_id, int(seed), int(steps))))
        return
    allowed = {"dqn": ("zoo", "rainbow"), "ppo": ("zoo", "ember")}[args.algo]
    if args.preset not in allowed:
        p.error(f"--preset {args.preset}: --algo {args.algo} takes {' or '.join(allowed)}")
    if args.report:
        print(report(args.results, args.out, args.plot))
        return
    from ember_np.algorithms import get_algorithm

    client = cluster_client(args)
    args.results.mkdir(parents=True, exist_ok=True)
    seeds = list(range(args.seeds))
    preset = "zoo" if args.library == "sb3" else args.preset
    key = preset_key(preset, args.num_envs if args.library == "ember_np" else None)
    if args.algo == "ppo":  # PPO's files and rows: ember_np ppo-<preset>, sb3 ppo
        key = "ppo" if args.library == "sb3" else f"ppo-{key}"
    for env_id in [e for e in args.envs.split(",") if e]:
        steps = args.steps or get_algorithm(args.algo).preset(preset, env_id).steps
        load_before = load_average()
        if args.library == "sb3":  # with --runs-root, the result file's seeds are finished
            path = result_path(args.results, "sb3", env_id, key)
            earlier = earlier_runs(path, steps) if args.runs_root else []
            data = run_sb3(env_id, seeds, args.workers, steps, args.runs_root, args.collect,
                           args.algo, earlier)  # fmt: skip
        else:
            data = run_ember(env_id, seeds, args.workers, steps, args.runs_root, args.collect,
                             preset, client, args.num_envs, args.algo)  # fmt: skip
        if not data["runs"]:
            print(f"{args.library} {env_id}: no seed finished; nothing written", file=sys.stderr)
            continue
        data.update(
            library=args.library, preset=key, env_id=env_id, steps=steps, workers=args.workers,
            load=f"{load_before} before, {load_average()} after (1/5/15-min load averages)"
            + (" of collecting; the training ran earlier" if args.collect else ""),
            command=f"python bench/learning.py --library {args.library} --envs {env_id} "
            + (f"--algo {args.algo} " if args.algo != "dqn" else "")
            + (f"--preset {preset} " if args.library == "ember_np" else "")
            + (f"--num-envs {args.num_envs} " if args.num_envs is not None and
               args.library == "ember_np" else "")
            + f"--seeds {args.seeds} --workers {args.workers}"
            + (f" --steps {args.steps}" if args.steps else "")
            + (" --runs-root RUNS" if args.runs_root else "")  # not this machine's path
            + (f" --scheduler {args.scheduler}" if args.scheduler else "")
            + (" --collect" if args.collect else ""),
        )  # fmt: skip
        result_path(args.results, args.library, env_id, key).write_text(json.dumps(data) + "\n")
        finals = [r["final"] for r in data["runs"]]
        print(f"{args.library} {key} {env_id}: final IQM {ci_text(finals)}, "
              f"{data['wall_seconds']:.0f} s for {len(seeds)} seeds", file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
