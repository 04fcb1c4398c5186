"""What every algorithm's frozen config dataclass (DqnConfig, PPOConfig) does alike:
NumPy scalars made Python ones, ``hidden_sizes`` checked, and the JSON-safe dict
round trip, written once so that run files and checkpoints of every algorithm
read and write their config the same way.

Each config keeps its own fields and its own ``_validate``; it calls these from
``__post_init__``, ``to_dict`` and ``from_dict``. Preset files (``--preset
FILE.json``) of every algorithm are read and checked against the env by
:func:`read_preset_json` and :func:`check_file_env`.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ember_np._validate import INT64_MAX

__all__ = [
    "config_from_dict",
    "config_to_dict",
    "hidden_sizes",
    "is_integral",
    "is_real",
    "normalize_fields",
    "plain",
]

C = TypeVar("C")


def is_integral(value: Any) -> bool:
    """Whether ``value`` is an integer (a Python int or a NumPy integer), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """Whether ``value`` is a real number (int, float or a NumPy one), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def plain(value: Any) -> Any:
    """``value`` with NumPy scalars as Python ones (np.bool_ -> bool, np.integer -> int,
    np.floating -> float), so that a config serialises to JSON whatever built it."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def hidden_sizes(value: Any) -> tuple[int, ...]:
    """``value`` (a sequence of positive integers) as a tuple of Python ints;
    anything else raises ValueError with the rule and an example."""
    rule = "hidden_sizes must be a sequence of positive integers, e.g. (64, 64), got"
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{rule} {value!r}")
    sizes = tuple(plain(s) for s in value)
    if not all(is_integral(s) and 1 <= s <= INT64_MAX for s in sizes):
        raise ValueError(f"{rule} {value!r}")
    return tuple(int(s) for s in sizes)


def normalize_fields(config: Any) -> None:
    """Make every field of the frozen dataclass ``config`` a plain Python value
    (:func:`plain`) and its ``hidden_sizes`` a checked tuple (:func:`hidden_sizes`),
    in place: what each config's ``__post_init__`` does before validating.

    NumPy scalars (np.int64(32), np.float32(0.99), np.True_) become Python ones
    here, so ``to_dict()`` is JSON-safe and run files and checkpoints can be written.
    """
    for f in dataclasses.fields(config):
        object.__setattr__(config, f.name, plain(getattr(config, f.name)))
    object.__setattr__(config, "hidden_sizes", hidden_sizes(config.hidden_sizes))


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-safe dict of every field of the dataclass ``config`` (hidden_sizes as a list)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        v = getattr(config, f.name)
        out[f.name] = list(v) if f.name == "hidden_sizes" else v
    return out


def config_from_dict(cls: type[C], data: Any) -> C:
    """Inverse of :func:`config_to_dict`: ``cls(**data)``, hidden_sizes a tuple again.

    A ``data`` that is not a dict, or has keys that are not fields of ``cls``, raises
    ValueError naming the class and the valid fields.
    """
    if not isinstance(data, dict):
        raise ValueError(f"a {cls.__name__} dict is expected, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"unknown {cls.__name__} field(s) {unknown}; valid fields are {sorted(known)}"
        )
    kwargs = dict(data)
    if isinstance(kwargs.get("hidden_sizes"), list):
        kwargs["hidden_sizes"] = tuple(kwargs["hidden_sizes"])
    return cls(**kwargs)


def read_preset_json(path: Path, example: str) -> dict[str, Any]:
    """The JSON object in the preset file ``path``; ValueError naming the file for one
    that cannot be read, is not UTF-8 JSON, nests too deeply or holds no object.
    ``example`` ends the too-deep message (what a preset is)."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read preset file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"preset file {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it "
            "as UTF-8 JSON"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"preset file {path} is not valid JSON: {exc}") from None
    except RecursionError:  # json recurses once per level: 200,000 nested brackets
        raise ValueError(
            f"preset file {path} nests its JSON too deeply to be a preset: {example}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"preset file {path} must hold a JSON object, got {type(data).__name__}")
    return data


def check_file_env(path: Path, file_env: Any, env_id: str | None) -> str:
    """A preset file's ``env_id`` (``""``: made for any env), checked against the env
    about to be trained (``env_id``, None: any); ValueError naming the file otherwise."""
    if not isinstance(file_env, str):
        raise ValueError(f"preset file {path}: env_id must be a string, got {file_env!r}")
    plain = file_env.removeprefix("ember_np/")
    if env_id is not None and plain and plain != env_id.removeprefix("ember_np/"):
        raise ValueError(
            f"preset file {path} was made for env_id {file_env!r}, not {env_id!r}: train "
            f'{file_env}, or remove or change "env_id" in the file to use it on {env_id}'
        )
    return file_env


def plain_env_id(env_id: str) -> str:
    """The gymnasium id a native (``ember_np/``) or ``module:`` id stands for."""
    return env_id.rpartition(":")[2].removeprefix("ember_np/")


def preset_name_for(name: str, own_env: str, env_id: str) -> str:
    """A preset's name in a run on ``env_id`` (config.json's ``"preset"``): ``name`` on
    the env it was made for (``own_env``; ``""``: any env), ``ENV/NAME`` (e.g.
    ``CartPole-v1/zoo``) on another, so a borrowed preset is never filed as the env's own."""
    own = plain_env_id(own_env)
    if not own or own == plain_env_id(env_id):
        return name
    return f"{own}/{name}"
