"""Registers the native environments with gymnasium, without importing gymnasium.

``import ember_np`` must stay light (NumPy only) so that a deployed
:class:`~ember_np.DqnPolicy` never loads gymnasium or numba, yet
``import ember_np; gymnasium.make("ember_np/CartPole-v1")`` must keep working.
gymnasium >= 1.0 dropped its plugin entry points (the ``gymnasium.envs``
group), so a package can only register its ids by calling
``gymnasium.register`` after gymnasium is imported. Its other route, an id of
the form ``"module:EnvId"`` (``gymnasium.make("ember_np.envs:ember_np/CartPole-v1")``),
works too but would make every user change their ids.

So :func:`register_when_gymnasium_loads` registers at once when gymnasium is
already imported, and otherwise puts a one-shot post-import hook on
``sys.meta_path``: when something imports gymnasium later, the hook lets the
normal import run and then registers. The hook removes itself on first use.
(``wrapt.register_post_import_hook`` does the same; it is not worth a
dependency for one module name.)

The registrations name their classes as ``"module:Class"`` strings, so nothing
here imports the compiled environments until ``gymnasium.make`` builds one.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

__all__ = ["NATIVE_ENV_ENTRY_POINTS", "register_native_envs", "register_when_gymnasium_loads"]

#: gymnasium id -> entry point of each native environment: the light mirror of
#: ember_np.envs.native.NATIVE_ENV_TABLE's ids and classes (importing the table
#: would import numba); tests/test_envs_native.py checks that they agree.
NATIVE_ENV_ENTRY_POINTS: dict[str, str] = {
    "ember_np/CartPole-v1": "ember_np.envs.native:CartPoleEnv",
    "ember_np/Acrobot-v1": "ember_np.envs.native:AcrobotEnv",
    "ember_np/MountainCar-v0": "ember_np.envs.native:MountainCarEnv",
}


def register_native_envs() -> None:
    """Register every native env id with gymnasium (imports gymnasium; idempotent)."""
    import gymnasium as gym

    for env_id, entry_point in NATIVE_ENV_ENTRY_POINTS.items():
        if env_id not in gym.registry:
            # The time limit is the env's own (max_steps), so no TimeLimit wrapper.
            gym.register(id=env_id, entry_point=entry_point)


# Neither class subclasses ``importlib.abc``'s Loader / MetaPathFinder: the import
# system needs only their methods, and ``importlib.abc`` imports
# ``importlib.resources`` and ``inspect`` (20-40 ms, a sixth of a deployed
# policy's start-up; issue 16).


class _ThenLoader:
    """Delegates to ``loader``, then calls ``callback`` once the module has run."""

    def __init__(self, loader: Any, callback: Callable[[], None]) -> None:
        self.loader = loader
        self.callback = callback

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its own loader (get_source, resources, reload).
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            self.callback()
        except Exception as exc:  # never break the user's import of gymnasium
            warnings.warn(
                f"ember_np could not register its native environments with gymnasium: {exc!r}; "
                "`import ember_np.envs` registers them explicitly",
                RuntimeWarning,
                stacklevel=2,
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _AfterImport:
    """A one-shot post-import hook: runs ``callback`` after ``name`` is imported."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        try:
            sys.meta_path.remove(self)  # first, so the search below does not find us again
        except ValueError:
            pass
        import importlib.util  # here, not at the top: a deployed policy never needs it

        spec = importlib.util.find_spec(fullname)  # the normal search, errors included
        if spec is None or spec.loader is None:
            return spec
        # cast: _ThenLoader is a Loader by its methods (importlib.abc is not imported)
        spec.loader = cast("Loader", _ThenLoader(spec.loader, self.callback))
        return spec


def register_when_gymnasium_loads() -> None:
    """Register the native envs now if gymnasium is imported, else right after it is."""
    if "gymnasium" in sys.modules:
        register_native_envs()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport("gymnasium", register_native_envs))
