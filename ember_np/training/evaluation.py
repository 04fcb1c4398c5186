"""A separate env for greedy evaluation, made from the training env's spec.

:func:`make_eval_env` is :class:`~ember_np.DqnTrainer`'s default eval env
(re-exported by ``ember_np.training.trainer``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["make_eval_env"]


def make_eval_env(env: Any, frozen_stats: bool = True) -> Any:
    """A separate env for greedy evaluation, built from ``env.spec``.

    ``gymnasium.make(env.spec)`` rebuilds the training env's wrappers, each in
    its initial state: a ``NormalizeObservation`` wrapper would start from
    fresh running statistics, so evaluation would see other observations than
    the ones the agent trained on. With ``frozen_stats`` (default) each
    ``NormalizeObservation`` of the new env shares the running statistics of
    the training env's wrapper at the same depth, with updates turned off, as
    Stable-Baselines3 evaluates with ``VecNormalize(training=False)``: the
    eval env always normalizes with the training statistics as they are now,
    and evaluating never changes them.

    Parameters
    ----------
    env : gymnasium.Env
        The training env (it needs a ``spec``).
    frozen_stats : bool
        Share the training statistics, frozen (default); False gives the
        eval env statistics of its own, updated as it runs.

    Raises
    ------
    ValueError
        If ``env`` has no spec to make the new env from, or the two wrapper
        chains do not line up.
    """
    import gymnasium
    from gymnasium.wrappers import NormalizeObservation

    spec = getattr(env, "spec", None)
    if spec is None:
        raise ValueError(
            "eval needs a separate environment: this env has no gymnasium spec to "
            "make one from, so pass DqnTrainer(..., eval_env=...)"
        )
    eval_env = gymnasium.make(spec)
    if not frozen_stats:
        return eval_env
    train_chain = _wrappers(env, NormalizeObservation)
    eval_chain = _wrappers(eval_env, NormalizeObservation)
    if len(train_chain) != len(eval_chain):
        raise ValueError(
            f"the eval env made from env.spec has {len(eval_chain)} NormalizeObservation "
            f"wrapper(s), the training env {len(train_chain)}: pass DqnTrainer(..., eval_env=...)"
        )
    for train_wrapper, eval_wrapper in zip(train_chain, eval_chain):
        if not hasattr(type(eval_wrapper), "update_running_mean"):  # gymnasium < 1.0
            raise ValueError(
                "freezing NormalizeObservation statistics needs gymnasium >= 1.0: upgrade "
                "gymnasium or pass DqnTrainer(..., eval_env=...)"
            )
        eval_wrapper.obs_rms = train_wrapper.obs_rms  # the same object: always current
        eval_wrapper.update_running_mean = False
    return eval_env


def _wrappers(env: Any, kind: type) -> list[Any]:
    """The wrappers of type ``kind`` in ``env``'s chain, outermost first."""
    found = []
    while env is not None:
        if isinstance(env, kind):
            found.append(env)
        env = getattr(env, "env", None)
    return found
