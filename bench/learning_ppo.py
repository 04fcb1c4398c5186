"""PPO's part of bench/learning.py (``--algo ppo``): SB3's PPO, the runs' envs, the table.

ember_np trains a PPO preset through the multi-seed runner, as DQN's rows do,
on the preset's number of envs (the RL Zoo's ``n_envs``): N copies of the
compiled env (``ember_np/<env>``, bit for bit gymnasium's dynamics, stepped in
one compiled loop) where one exists, else gymnasium's env in a sync vector env.
SB3 trains ``stable_baselines3.PPO("MlpPolicy", make_vec_env(env, n_envs))``
with the Zoo's arguments (the ``zoo`` preset's ``sb3_kwargs``): ``lin_X`` as the
Zoo's linear schedule (``progress_remaining * X``), ``normalize`` as
``VecNormalize(gamma=gamma)``, whose statistics are frozen for every evaluation
(``training=False, norm_reward=False``). Both evaluate greedily (the argmax of
the logits; SB3's ``deterministic=True``) on gymnasium's env, on the same
episodes.

Result files: ``learning_ember_np-ppo-<preset>_<env>.json`` and
``learning_sb3-ppo_<env>.json``, beside DQN's and never in their place.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The PPO rows of the report: ember_np's own preset, the Zoo's, then SB3 (the Zoo's).
PPO_ROWS = (("ember_np", "ppo-ember"), ("ember_np", "ppo-zoo"), ("sb3", "ppo"))

#: The final IQM each env's PPO row aims at within the Zoo's budget (CartPole-v1: every
#: seed at 500), the column "final >= target" counts the seeds that reach it.
PPO_TARGETS = {"CartPole-v1": 500.0, "Acrobot-v1": -75.0, "MountainCar-v0": -110.0,
               "LunarLander-v3": 240.0}  # fmt: skip


def ppo_training_env(
    env_id: str, preset: Any, preset_name: str, num_envs: int | None
) -> tuple[str, dict[str, Any], str]:
    """The env a PPO seed trains on, the RunSpec's vector fields and the run version:
    ``num_envs`` (None: the preset's) copies of the compiled env where ember_np has
    one, else of gymnasium's in a sync vector env."""
    from ember_np.training.setup import NATIVE_IDS

    n = preset.num_envs if num_envs is None else num_envs
    version = f"bench-ppo-{preset_name}" + ("" if num_envs is None else f"-n{num_envs}")
    if env_id in NATIVE_IDS:
        return NATIVE_IDS[env_id], {"num_envs": n}, version
    vector: dict[str, Any] = {"num_envs": n}
    if n > 1:
        vector["vectorization"] = "sync"
    return env_id, vector, version


def linear_schedule(value: float) -> Callable[[float], float]:
    """The Zoo's ``lin_<value>``: ``value`` times the fraction of the run left."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * value

    return schedule


def sb3_arguments(sb3_kwargs: dict[str, Any]) -> tuple[dict[str, Any], int, bool]:
    """SB3 ``PPO``'s keyword arguments from a Zoo row (``lin_`` strings as schedules),
    its ``n_envs`` and whether it normalises (``VecNormalize``)."""
    skip = ("n_envs", "n_timesteps", "normalize")
    kwargs = {
        k: linear_schedule(float(v[4:])) if isinstance(v, str) and v.startswith("lin_") else v
        for k, v in sb3_kwargs.items()
        if k not in skip
    }
    return kwargs, int(sb3_kwargs["n_envs"]), bool(sb3_kwargs["normalize"])


class SB3Greedy:
    """An SB3 policy acting greedily on one raw observation, normalised by frozen stats."""

    def __init__(self, policy: Any, normalizer: Any = None) -> None:
        self.policy = policy
        self.normalizer = normalizer

    def act(self, obs: Any) -> int:
        if self.normalizer is not None:
            obs = self.normalizer.normalize_obs(obs)
        return int(self.policy.predict(obs, deterministic=True)[0])


def sb3_ppo_seed(env_id: str, seed: int, steps: int) -> dict:
    """One seed of SB3's PPO with the Zoo's arguments (runs in its own process)."""
    import torch
    from learning import EVAL_EPISODES, FINAL_EPISODES, evaluate, final_eval_seed
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from ember_np.ppo.presets import get_preset

    torch.set_num_threads(1)
    kwargs, n_envs, normalize = sb3_arguments(get_preset("zoo", env_id).sb3_kwargs or {})
    venv = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:
        venv = VecNormalize(venv, gamma=kwargs.get("gamma", 0.99))

    def frozen() -> Any:
        """A VecNormalize that only normalises, with a copy of the training stats."""
        if not normalize:
            return None
        norm = VecNormalize(DummyVecEnv([_dummy(env_id)]), training=False, norm_reward=False)
        norm.obs_rms = copy.deepcopy(venv.obs_rms)
        norm.clip_obs, norm.epsilon = venv.clip_obs, venv.epsilon
        return norm

    chunk = max(1, steps // 10)
    curve: list[list[float]] = []
    best: dict = {"mean": -float("inf"), "state": None, "norm": None}
    t0 = time.perf_counter()

    class PeriodicEval(BaseCallback):
        next_eval = chunk

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += chunk
                norm = frozen()
                mean = statistics.fmean(evaluate(SB3Greedy(self.model.policy, norm), env_id,
                                                 EVAL_EPISODES, 5_000 + seed))  # fmt: skip
                curve.append([self.num_timesteps, round(mean, 2),
                              round(time.perf_counter() - t0, 2)])  # fmt: skip
                if mean > best["mean"]:
                    best.update(mean=mean, norm=norm,
                                state=copy.deepcopy(self.model.policy.state_dict()))  # fmt: skip
            return True

    model = PPO("MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **kwargs)
    # A logger with no outputs: SB3's default makes an empty /tmp/SB3-<date> per run.
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(steps, callback=PeriodicEval())
    train_seconds = time.perf_counter() - t0
    final = evaluate(SB3Greedy(model.policy, frozen()), env_id, FINAL_EPISODES,
                     final_eval_seed(seed))  # fmt: skip
    if best["state"] is not None:
        model.policy.load_state_dict(best["state"])
    best_returns = evaluate(SB3Greedy(model.policy, best["norm"] if best["state"] is not None
                                      else frozen()), env_id, FINAL_EPISODES,
                            final_eval_seed(seed))  # fmt: skip
    return {
        "seed": seed,
        "final": statistics.fmean(final),
        "best": statistics.fmean(best_returns),
        "curve": curve,
        "train_seconds": round(train_seconds, 2),
    }


def _dummy(env_id: str) -> Callable[[], Any]:
    """An env maker for the normalising-only VecNormalize (it never steps it)."""
    import gymnasium as gym

    return lambda: gym.make(env_id)


# -- the report ---------------------------------------------------------------------------


def ppo_row_name(library: str, key: str, data: dict) -> str:
    """``ember_np PPO zoo, compiled env x 8`` / ``SB3 PPO zoo, gymnasium env x 8``."""
    from ember_np.ppo.presets import get_preset

    env_id = data["env_id"]
    if library == "sb3":
        return f"sb3 PPO zoo, gymnasium env x {get_preset('zoo', env_id).num_envs}"
    where = "compiled env" if str(data.get("train_env", "")).startswith("ember_np/") else (
        "gymnasium env")  # fmt: skip
    return f"ember_np PPO {key.removeprefix('ppo-')}, {where} x {data.get('num_envs', '?')}"


def ppo_changed(key: str, data: dict) -> str:
    """``""``, or a note naming the fields in which ``data``'s config differs from
    the preset ``key`` (``ppo-zoo``) today: a result kept after the preset changed."""
    from ember_np.ppo.config import PPOConfig
    from ember_np.ppo.presets import get_preset

    if "config" not in data:
        return ""
    today = get_preset(key.removeprefix("ppo-"), data["env_id"]).config_for(data["steps"])
    now, then = today.to_dict(), PPOConfig.from_dict(data["config"]).to_dict()
    changed = sorted(k for k in now if now[k] != then.get(k))
    return f", earlier preset: {', '.join(changed)} since changed" if changed else ""


def ppo_report(results: Path, plot_path: Path) -> list[str]:
    """The report's PPO section (no lines when no PPO result is saved), and its curves
    in ``plot_path``."""
    from learning import SOLVED, plot, read_result, table_row, time_to_solve

    found = {(lib, key, env): data for lib, key in PPO_ROWS for env in PPO_TARGETS
             if (data := read_result(results, lib, env, key)) is not None}  # fmt: skip
    if not found:
        return []
    lines = [
        "PPO: ember_np's presets `ember` (this project's, chosen on tuning seeds 1000-1019, "
        "never on these) and `zoo` (the RL Zoo's ppo.yml row), each on its number of envs "
        "(compiled env x N: N copies of ember_np's compiled env, bit for bit gymnasium's "
        "dynamics, stepped in one compiled loop), against SB3's PPO with the Zoo's arguments "
        "on gymnasium's env (make_vec_env, VecNormalize where the Zoo normalises). IQM [95% "
        "stratified-bootstrap CI] over seeds of each seed's mean greedy return on 20 fresh "
        "episodes, of the final policy and of best.npz; P(> SB3 PPO zoo): probability that a "
        "random seed's final policy beats a random SB3 seed's (ties count half), with its "
        "95% CI; 'final >= target': seeds whose final policy reaches "
        + ", ".join(f"{v:g} ({e})" for e, v in PPO_TARGETS.items())
        + ". Commands: python bench/learning.py --algo ppo --library ember_np --preset "
        "ember|zoo --envs ENV --seeds 20 --workers 2; nice -n 10 python bench/learning.py "
        "--algo ppo --library sb3 --envs ENV --seeds 20 --workers 2",
        "",
        "| env | library, preset (budget) | seeds | final | best | final >= target "
        "| P(> SB3 PPO zoo), final | wall time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for env_id, target in PPO_TARGETS.items():
        theirs = found.get(("sb3", "ppo", env_id))
        for lib, key in PPO_ROWS:
            d = found.get((lib, key, env_id))
            if d is None:
                continue
            name = ppo_row_name(lib, key, d) + (ppo_changed(key, d) if lib != "sb3" else "")
            lines.append(table_row(env_id, name, d, target, theirs if lib != "sb3" else None))
    lines.append("")
    for env_id, threshold in SOLVED.items():
        parts = [f"{ppo_row_name(lib, key, d)}: {time_to_solve(d, threshold)}"
                 for lib, key in PPO_ROWS if (d := found.get((lib, key, env_id)))]  # fmt: skip
        if parts:
            lines.append(f"Time to solve {env_id} with PPO (IQM of greedy evaluations "
                         f">= {threshold:g}, wall time for all seeds): "
                         + "; ".join(parts))  # fmt: skip
    for (lib, key, env_id), d in sorted(found.items()):
        if d.get("missing_seeds"):
            lines.append(f"- {ppo_row_name(lib, key, d)} {env_id}: partial, {len(d['runs'])} "
                         f"seeds finished (not run: seeds {d['missing_seeds']})")  # fmt: skip
        lines.append(f"- {ppo_row_name(lib, key, d)} {env_id}: machine load during the run: "
                     f"{d.get('load', '?')}; command: {d.get('command', '?')}")  # fmt: skip
    if plot(found, plot_path, PPO_ROWS, PPO_TARGETS):
        lines += ["", f"PPO's IQM learning curves with 95% CI bands: {plot_path.name}"]
    return lines
