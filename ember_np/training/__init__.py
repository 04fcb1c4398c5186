"""Training drivers: DqnTrainer and TrainingRun; the loop's public callbacks; run specs.

``LoopCallback`` (its events and their order, ``CALL_ORDER``),
``train_and_evaluate``, ``TensorBoardCallback``, a run's settings
(``RunSpec``, ``resolve``, ``build``) and ``resume`` can be imported from here;
like ``ember_np``'s own names they are imported on first use (PEP 562), so
importing a submodule (``ember_np.training.run``) loads nothing more.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember_np.training.loop import CALL_ORDER, LoopCallback, train_and_evaluate
    from ember_np.training.spec import RunSpec, build, resolve, resume
    from ember_np.training.tensorboard import TensorBoardCallback

_HOMES = {
    "CALL_ORDER": "ember_np.training.loop",
    "LoopCallback": "ember_np.training.loop",
    "train_and_evaluate": "ember_np.training.loop",
    "TensorBoardCallback": "ember_np.training.tensorboard",
    "RunSpec": "ember_np.training.spec",
    "build": "ember_np.training.spec",
    "resolve": "ember_np.training.spec",
    "resume": "ember_np.training.spec",
}

__all__ = [
    "CALL_ORDER",
    "LoopCallback",
    "RunSpec",
    "TensorBoardCallback",
    "build",
    "resolve",
    "resume",
    "train_and_evaluate",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
