"""The algorithm registry: the one place the commands find an algorithm.

An algorithm is registered once, as an :class:`Algorithm`: its config class,
how to build and restore its agent, its presets, the format tag of its
checkpoints, how to read a checkpoint as a deployable policy, and optionally
its tune search space and ONNX export. Everything above the algorithms (the
command line's ``train --algo``, ``--seeds`` on processes or Dask,
``resume``, ``eval``, ``tune``, ``report``, ``export``, :class:`RunSpec
<ember_np.training.spec.RunSpec>`) asks :func:`get_algorithm` and nothing
else, so a second algorithm needs no change above this module.

Names:

* ``"dqn"``: built in (:mod:`ember_np.dqn.algorithm`), the default.
* ``"ppo"``: built in (:mod:`ember_np.ppo.algorithm`).
* ``"package.module:NAME"``: an algorithm defined outside ember_np.
  ``package.module`` is imported and its attribute ``NAME`` must be an
  :class:`Algorithm`. The full string is what a run records (config.json's
  ``"algorithm"``), so worker processes and ``resume`` find it again the same
  way, as gymnasium's ``"module:EnvId"`` ids do.

This module imports no algorithm until one is asked for: ``import ember_np``
stays light.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

#: The algorithm a run uses when none is named (``--algo`` / config.json without one).
DEFAULT_ALGORITHM = "dqn"

#: Built-in algorithms: name -> ``"module:attribute"`` of their :class:`Algorithm`.
BUILT_IN: dict[str, str] = {
    "dqn": "ember_np.dqn.algorithm:DQN",
    "ppo": "ember_np.ppo.algorithm:PPO",
}


class SearchSpace(Protocol):
    """What ``ember-np tune`` needs of an algorithm's search space."""

    def suggest_config(self, trial: Any, settings: Any) -> Any:
        """A config for an Optuna ``trial`` (fields in ``settings.fixed`` not searched)."""
        ...

    def config_for(self, settings: Any, values: Mapping[str, Any]) -> Any:
        """``settings``' base config with the sampled ``values`` and fixed fields."""
        ...


def _no_presets(env_id: str) -> dict[str, Any]:
    return {}


def _no_default(env_id: str) -> Any:
    return None


@dataclass(frozen=True)
class Algorithm:
    """One algorithm, as the layers above it see it.

    Attributes
    ----------
    name : str
        What ``--algo`` takes and config.json records; also the config.json key
        that holds the config (``"dqn": {...}``).
    config_class : type
        A frozen dataclass with ``to_dict()``, ``from_dict(d)`` and
        ``replace(**fields)`` (``--set`` goes through ``replace``).
    checkpoint_format : str
        The ``"format"`` tag of the agent checkpoints it writes; a checkpoint of
        another algorithm is refused naming both.
    make_agent : callable
        ``(env, config, seed) -> agent``: a fresh agent implementing
        :class:`~ember_np.types.LearningAgent` for ``env``.
    load_agent : callable
        ``(path) -> agent``: an agent restored from one of its checkpoints
        (``resume``).
    load_policy : callable
        ``(path) -> policy``: the greedy policy of a checkpoint, with ``act(obs)``,
        ``encoder`` and ``action_mapper`` (``eval``).
    presets : callable
        ``(env_id) -> {name: Preset}``: the env's ready-made configs (may be empty).
    default_preset : callable
        ``(env_id) -> Preset | None``: the preset a run uses when none is named.
    get_preset : callable or None
        ``(name, env_id) -> Preset``: a preset by any name the algorithm takes
        (files included); None: names from ``presets`` only.
    describe_agent : callable
        ``(agent) -> str``: its state in a few words (``resume``'s first line).
    check_setup : callable or None
        ``(env, config, copies) -> None``: raise ValueError (one line, saying what
        to change) for a config this machine cannot run, before anything is
        allocated; ``copies`` agents will live at once (a tune trial's seeds).
    tune_space : SearchSpace or None
        ``ember-np tune``'s search space (an object or module with
        ``suggest_config(trial, settings)`` and ``config_for(settings, values)``,
        e.g. :mod:`ember_np.dqn.search_space`); None: the algorithm cannot be tuned.
    export_onnx : callable or None
        ``(checkpoint, output) -> dict``: the checkpoint's policy as an ONNX file;
        None: no ONNX export.
    entry_kernel : callable or None
        ``(native, num_envs) -> "module:kernel" or None``: the compiled kernel whose
        numba cache says whether a run (on a native env in the fused loop, or not;
        with ``num_envs`` envs) compiles first (``train`` then says so), by name so
        that the algorithm need not import the layer above it that may hold it.
        None: nothing worth a notice.
    compile_jobs : callable or None
        ``(run) -> [CompileJob, ...]``: the jobs that compile, in worker processes
        (:mod:`ember_np._precompile`), what a first run about to train
        (a :class:`~ember_np._precompile.RunToCompile`) compiles; [] for a run it has
        none for. None: the training layer's own (``training/precompile.py``: DQN's
        one-env loops, which it holds).
    """

    name: str
    config_class: type[Any]
    checkpoint_format: str
    make_agent: Callable[[Any, Any, int], Any]
    load_agent: Callable[[Path], Any]
    load_policy: Callable[[Path], Any]
    presets: Callable[[str], Mapping[str, Any]] = _no_presets
    default_preset: Callable[[str], Any] = _no_default
    get_preset: Callable[[str, str], Any] | None = None
    describe_agent: Callable[[Any], str] = str
    check_setup: Callable[[Any, Any, int], None] | None = None
    tune_space: SearchSpace | None = None
    export_onnx: Callable[[Path, Path], dict[str, Any]] | None = None
    entry_kernel: Callable[[bool, int], str | None] | None = None
    compile_jobs: Callable[[Any], Sequence[Any]] | None = None

    def preset(self, name: str, env_id: str) -> Any:
        """The preset ``name`` for ``env_id``; ValueError listing the names it takes."""
        if self.get_preset is not None:
            return self.get_preset(name, env_id)
        presets = self.presets(env_id)
        if name not in presets:
            known = ", ".join(presets) or "none"
            raise ValueError(
                f"unknown {self.name} preset {name!r} for {env_id} (its presets: {known}); "
                "leave --preset out for the config's defaults, or use --set fields"
            )
        return presets[name]


def lazy(target: str) -> Callable[..., Any]:
    """A function that calls ``target`` (``"package.module:name.attr"``), importing the
    module at its first call: an :class:`Algorithm`'s entries point at its agent,
    policy and presets without importing them when the registry is read."""
    module_name, _, path = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        found: Any = importlib.import_module(module_name)
        for part in path.split("."):
            found = getattr(found, part)
        return found(*args, **kwargs)

    call.__name__ = call.__qualname__ = path.rpartition(".")[2]
    call.__doc__ = f"``{target}``, imported when first called."
    return call


_LOADED: dict[str, Algorithm] = {}


def known_algorithms() -> list[str]:
    """The built-in names and every ``module:NAME`` algorithm loaded so far."""
    return sorted(set(BUILT_IN) | set(_LOADED))


def get_algorithm(name: str | None = None) -> Algorithm:
    """The algorithm called ``name`` (None: :data:`DEFAULT_ALGORITHM`).

    Raises
    ------
    ValueError
        For a name that is neither built in nor an importable ``module:NAME``
        holding an :class:`Algorithm`, naming what was given and what exists.
    """
    name = DEFAULT_ALGORITHM if name is None else name
    if not isinstance(name, str) or not name:
        raise ValueError(f"an algorithm name must be a non-empty string, got {name!r}")
    if name in _LOADED:
        return _LOADED[name]
    target = BUILT_IN.get(name, name)
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(
            f"unknown algorithm {name!r}; built in: {', '.join(sorted(BUILT_IN))}, or "
            "'package.module:NAME' for an Algorithm defined elsewhere"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"algorithm {name!r}: cannot import {module_name!r} ({exc})") from None
    algorithm = getattr(module, attribute, None)
    if not isinstance(algorithm, Algorithm):
        raise ValueError(
            f"algorithm {name!r}: {module_name}.{attribute} must be an "
            f"ember_np.algorithms.Algorithm, got {type(algorithm).__name__}"
        )
    if name in BUILT_IN and algorithm.name != name:
        raise ValueError(f"built-in algorithm {name!r} is registered as {algorithm.name!r}")
    _LOADED[name] = algorithm
    return algorithm


def check_checkpoint_format(path: str | os.PathLike[str], algorithm: str) -> None:
    """Refuse a checkpoint that ``algorithm`` did not write, naming both algorithms.

    Raises
    ------
    CheckpointError
        The file is not a checkpoint, or its ``"format"`` tag is another
        algorithm's (named when it is one :func:`known_algorithms` holds).
    """
    from ember_np.checkpoint import CheckpointError, format_tag

    expected = get_algorithm(algorithm)
    tag = format_tag(path)
    if tag is None:
        raise CheckpointError(
            os.fspath(path),
            f"not an ember_np checkpoint (no 'format' "
            f"key), expected {expected.checkpoint_format!r} ({expected.name})",
        )
    if tag == expected.checkpoint_format:
        return
    writer = algorithm_for_format(tag)
    wrote = f"a {writer} checkpoint" if writer else "an unknown algorithm's checkpoint"
    raise CheckpointError(
        os.fspath(path),
        f"{wrote} (format {tag!r}), but this run's algorithm is {algorithm} "
        f"(format {expected.checkpoint_format!r}): resume or evaluate it with the "
        "algorithm that wrote it",
    )


def algorithm_for_format(tag: str | None) -> str | None:
    """The name (as ``--algo`` takes it) of the algorithm, built in or a ``module:NAME``
    one loaded so far, whose checkpoints carry the format tag ``tag``; None for none."""
    for name in known_algorithms():
        if get_algorithm(name).checkpoint_format == tag:
            return name
    return None


def algorithm_of_config(saved: Mapping[str, Any]) -> str:
    """The algorithm a saved description names: config.json, seeds.json's spec or a
    study's settings (``"algorithm"``; absent, as in every DQN run's: dqn)."""
    name = saved.get("algorithm", DEFAULT_ALGORITHM)
    if not isinstance(name, str) or not name:
        raise ValueError(f"'algorithm' must be an algorithm's name, got {name!r}")
    return name
