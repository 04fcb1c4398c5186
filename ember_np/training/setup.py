"""What a run is built from, read from ids and strings: the library side of ``ember-np train``.

The command line (``ember_np.cli``), the multi-seed engine and ``tune`` all
build their env and config here, so the three build the same thing from the
same words. Every refusal is a :class:`SetupError` (a ``ValueError``) with a
one-line message; the command line prints it and exits with status 2.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "NATIVE_IDS",
    "SetupError",
    "check_checkpoint_env",
    "first_compile_notice",
    "gives_masks",
    "VECTORIZATIONS",
    "make_env",
    "make_train_env",
    "native_to_plain",
    "one_line",
    "parse_sets",
    "run_name",
    "vector_settings",
    "with_env_masks",
]

#: gymnasium ids that have a compiled twin: ``train`` uses it unless --gymnasium-env.
NATIVE_IDS = {e: f"ember_np/{e}" for e in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")}


class SetupError(ValueError):
    """A setting that cannot be used (an unknown env id, a bad ``key=value``, ...).

    Its message is one line that names the setting and says what to do.
    """


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (its type's name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def make_env(env_id: str) -> Any:
    """``gym.make(env_id)``: any id gymnasium takes, ``module:EnvId`` included.

    gymnasium's own message is kept (its "Did you mean ...?" and "use v1
    instead" hints), on one line.

    Raises
    ------
    SetupError
        When gymnasium cannot make ``env_id``.
    """
    import gymnasium as gym

    try:
        with warnings.catch_warnings(record=True) as said:  # repeated only if make succeeds
            warnings.simplefilter("always")
            env = gym.make(env_id)
        for w in said:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return env
    except (gym.error.NameNotFound, gym.error.NamespaceNotFound) as exc:
        raise SetupError(f"unknown environment {env_id!r}: {one_line(exc)}") from None
    except Exception as exc:  # a bad version, a missing optional dependency such as box2d
        raise SetupError(f"cannot make {env_id!r}: {one_line(exc)}") from None


#: ``--vectorization`` values: how a gymnasium env's N copies run (``gymnasium.make_vec``).
VECTORIZATIONS = ("sync", "async")
#: Most envs stepped together (``--num-envs``): more only allocates without speeding up.
MAX_NUM_ENVS = 1024
#: How ``--vectorization async`` starts its processes: never a bare ``fork``, gymnasium's
#: default on Linux, which copies the training process with its threads (BLAS, tqdm's
#: monitor, a Dask client's event loop); a lock one of them held at that moment stays
#: locked in the child for ever, and the parent then waits for a step that never comes.
#: SB3's ``SubprocVecEnv`` chooses the same way.
ASYNC_START_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def make_train_env(env_id: str, num_envs: int = 1, vectorization: str | None = None) -> Any:
    """The env a run trains on: one env, or ``num_envs`` copies stepped together.

    One env is :func:`make_env`'s. N copies of a native env (``ember_np/<id>``)
    are a :class:`~ember_np.envs.NativeVecEnv` (one compiled loop; no
    ``vectorization``); N copies of any other env are
    ``gymnasium.make_vec(env_id, N, vectorization_mode=vectorization)``
    (``"sync"``, the default, or ``"async"``: one process per copy, started by
    :data:`ASYNC_START_METHOD`).

    Raises
    ------
    SetupError
        A bad ``num_envs`` or ``vectorization`` (:func:`vector_settings`),
        or an env gymnasium cannot make.
    """
    n, mode = vector_settings(env_id, num_envs, vectorization)
    env = make_env(env_id)  # gymnasium's own checks and messages (an unknown id, a bad version)
    if n == 1:
        return env
    env.close()
    if mode is None:
        from ember_np.envs.native import NativeVecEnv

        return NativeVecEnv(env_id.rpartition(":")[2], n)
    import gymnasium as gym

    if mode == "async" and mp.current_process().daemon:
        raise SetupError(
            f"--vectorization async starts a process per env copy, and this process "
            f"({mp.current_process().name}) is daemonic, which may not start processes: on a "
            "Dask cluster start the workers with DASK_DISTRIBUTED__WORKER__DAEMON=False, or use "
            "--vectorization sync"
        )
    try:
        kwargs = {"context": ASYNC_START_METHOD} if mode == "async" else {}
        return gym.make_vec(env_id, n, vectorization_mode=mode, vector_kwargs=kwargs)
    except Exception as exc:  # an env that cannot be copied into a subprocess, ...
        raise SetupError(f"cannot make {n} copies of {env_id!r} ({mode}): "
                         f"{one_line(exc)}") from None  # fmt: skip


def vector_settings(
    env_id: str, num_envs: Any, vectorization: str | None
) -> tuple[int, str | None]:
    """``--num-envs`` and ``--vectorization`` for ``env_id``, checked and resolved.

    Returns (num_envs, vectorization): None for one env or a native env's
    copies (one compiled loop), else ``"sync"`` (the default) or ``"async"``.

    Raises
    ------
    SetupError
        num_envs not an integer in [1, MAX_NUM_ENVS], an unknown
        vectorization, or one given for one env or for a native env.
    """
    if (
        isinstance(num_envs, bool)
        or not isinstance(num_envs, int)
        or not (1 <= num_envs <= MAX_NUM_ENVS)
    ):
        raise SetupError(f"--num-envs must be an integer in [1, {MAX_NUM_ENVS}], got {num_envs!r}")
    native = env_id.rpartition(":")[2].startswith("ember_np/")
    if vectorization is None:
        return num_envs, None if num_envs == 1 or native else "sync"
    if vectorization not in VECTORIZATIONS:
        raise SetupError(f"--vectorization must be one of {', '.join(VECTORIZATIONS)}, got "
                         f"{vectorization!r}")  # fmt: skip
    if num_envs == 1:
        raise SetupError(f"--vectorization {vectorization} needs --num-envs N with N > 1 "
                         "(one env is stepped directly)")  # fmt: skip
    if native:
        raise SetupError(
            f"--vectorization {vectorization} is for gymnasium envs: {env_id}'s {num_envs} "
            "copies run in one compiled loop; drop --vectorization, or add --gymnasium-env "
            "to step gymnasium's env"
        )
    return num_envs, vectorization


def native_to_plain(env_id: str) -> str:
    """The gymnasium id a native or ``module:`` id stands for (its presets' key)."""
    env_id = env_id.rpartition(":")[2]
    return env_id[len("ember_np/") :] if env_id.startswith("ember_np/") else env_id


def run_name(env_id: str) -> str:
    """A run-directory name for an env id: path separators (and ``:``) become ``_``."""
    return re.sub(r"[/\\:]", "_", env_id)


def parse_sets(pairs: Sequence[str], config_class: Any = None) -> dict[str, Any]:
    """``["key=value", ...]`` as overrides of ``config_class``'s fields (``--set``;
    default :class:`~ember_np.DqnConfig`).

    A value is read as JSON (``64``, ``[64, 64]``, ``true``), as ``A ** B``
    for an integer power, as a tuple of JSON values written as Python does
    (``(64, 64)``, ``(64,64)``, ``(64,)``, ``64,64``), else as the string
    itself (the config then names what it expected); a list becomes a tuple.

    Raises
    ------
    SetupError
        A pair without ``=`` or a key that is not a field of the config.
    """
    if config_class is None:
        from ember_np.dqn.config import DqnConfig as config_class

    fields = set(config_class().to_dict())
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SetupError(f"--set expects key=value, got {pair!r}")
        if key not in fields:
            raise SetupError(f"unknown config key {key!r}; valid keys: {', '.join(sorted(fields))}")
        power = re.fullmatch(r"\s*(\d+)\s*\*\*\s*(\d{1,3})\s*", raw)
        try:
            value = int(power[1]) ** int(power[2]) if power else json.loads(raw)
        except json.JSONDecodeError:
            value = _tuple_value(raw)
        if isinstance(value, list):
            value = tuple(value)
        out[key] = value
    return out


def _tuple_value(raw: str) -> Any:
    """``(64, 64)``, ``(64,)``, ``()`` or ``64,64`` as a tuple of JSON values; else ``raw``.

    Parentheses hold a tuple only with a comma inside (``(64)`` is not one, as
    in Python) or nothing; without them, a comma makes the tuple.
    """
    text = raw.strip()
    inner = text[1:-1].strip() if text.startswith("(") and text.endswith(")") else None
    if inner is None and "," not in text or inner is not None and inner and "," not in inner:
        return raw
    body = (text if inner is None else inner).removesuffix(",")
    if not body.strip() and "," in text:  # "," or "(,)": no tuple in Python either
        return raw
    try:
        items = json.loads(f"[{body}]")
    except json.JSONDecodeError:
        return raw
    if any(isinstance(item, (list, dict)) for item in items):
        return raw
    return tuple(items)


def gives_masks(env_id: str, make: Callable[[str], Any] = make_env) -> bool:
    """Whether a fresh ``env_id`` env puts an ``action_mask`` in the info of its reset.

    ember_np's native envs never do, and are not made to find out: their reset
    is a compiled kernel, and loading numba's cache for it cost ``ember-np
    tune``'s parent process, which trains nothing, about 0.8 s.
    """
    from ember_np.training.trainer import action_mask_of

    if env_id in NATIVE_IDS.values():
        return False
    probe = make(env_id)
    try:
        _, info = probe.reset(seed=0)
        return action_mask_of(info) is not None
    finally:
        probe.close()


def with_env_masks(
    config: Any,
    env_id: str,
    overrides: dict[str, Any],
    say: Callable[[str], None] = print,
    make: Callable[[str], Any] = make_env,
) -> Any:
    """``config`` with action masks on when ``env_id`` gives them, unless ``overrides`` chose.

    The one place ``train`` and ``tune`` decide it, so both build the same
    config. A config without an ``action_masks`` field is returned as it is.
    ``say`` gets the one line that says masks were turned on.
    """
    if not hasattr(config, "action_masks"):  # an algorithm without masks
        return config
    if "action_masks" in overrides or config.action_masks or not gives_masks(env_id, make):
        return config
    say(f"{env_id}: the env gives info['action_mask']: training with action masks "
        "(--set action_masks=false turns this off)")  # fmt: skip
    return config.replace(action_masks=True)


def first_compile_notice(
    native: bool, num_envs: int = 1, algorithm: str = "dqn", single_run: bool = True
) -> str | None:
    """One line for a run about to compile its kernels (an empty or stale numba cache),
    else None.

    ``native``: the run trains a native env in the fused loop, else the Python loop;
    ``algorithm`` names the algorithm, whose :attr:`Algorithm.entry_kernel
    <ember_np.algorithms.Algorithm.entry_kernel>` is the kernel checked (the rest of
    the kernels a run uses compile with it). ``single_run``: one run (not ``--seeds``),
    whose worker processes may compile its kernels and show their own progress line
    instead (:func:`~ember_np.training.precompile.workers_compile`). Nothing is compiled
    here.
    """
    from ember_np._jit import cached_on_disk
    from ember_np.algorithms import get_algorithm
    from ember_np.training.precompile import workers_compile

    if single_run and workers_compile(algorithm, num_envs):
        return None
    entry_of = get_algorithm(algorithm).entry_kernel
    name = None if entry_of is None else entry_of(native, num_envs)
    if name is None:
        return None
    module, _, kernel = name.partition(":")
    if cached_on_disk(getattr(importlib.import_module(module), kernel)) is not False:
        return None
    return (
        "compiling ember_np's kernels for the first time: about a minute or two, on one "
        "core; later runs load them from numba's cache in a second or two"
    )


def check_checkpoint_env(env: Any, env_id: str, encoder: Any, mapper: Any, path: Path) -> None:
    """Refuse an env whose spaces differ from the ones the checkpoint was trained on.

    Raises
    ------
    SetupError
        ``env``'s observation or action space is not ``encoder``'s / ``mapper``'s.
    """
    from ember_np.encoding import IndexActionMapper, describe, encoder_for_space, single_spaces

    try:
        obs_space, action_space = single_spaces(env)
        want = (describe(encoder_for_space(obs_space)),
                describe(IndexActionMapper.for_space(action_space)))  # fmt: skip
    except ValueError as exc:
        raise SetupError(f"{env_id!r}: {exc}") from None
    have = (describe(encoder), describe(mapper))
    if want != have:
        raise SetupError(
            f"{path} was trained on {have[0]} and {have[1]}, but config.json's env {env_id!r} "
            f"has {want[0]} and {want[1]}: set env_id in config.json to the env the run "
            "trained on"
        )
