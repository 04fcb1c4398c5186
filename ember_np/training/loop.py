"""The one training loop: compiled chunks, periodic greedy evaluation, callbacks.

Everything that trains calls :func:`train_and_evaluate`: ``ember-np train``
and ``resume`` (``ember_np.cli.training``), each seed of a multi-seed run
(:func:`ember_np.training.seed_run.train_seed`) and each seed of a tune
trial (:func:`ember_np.tune.evaluate_config`). What varies between them goes
in as callbacks (SB3's ``BaseCallback``, trimmed to the events this loop has):
a progress bar, an evaluation curve, a line per evaluation.

What the loop writes is what :class:`~ember_np.DqnTrainer` writes:
``trainer.train(n)`` logs training episodes, writes numbered checkpoints
every ``checkpoint_freq`` steps (rotating to ``keep_checkpoints``) and keeps
``latest.npz`` current; ``trainer.eval(k)`` logs the greedy episodes and
saves ``best.npz`` when the mean reward beats the best so far.

Reading map, in call order::

    train_and_evaluate            this module: chunk sizes, when to evaluate
      DqnTrainer.train(chunk)     training/trainer.py: fused compiled loop or
                                  the Python step loop (same numbers either way)
      DqnTrainer.eval(k)          training/trainer.py: greedy episodes, best.npz
      callbacks                   LoopCallback's events, in its documented order
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember_np.stats import EvalReport

__all__ = [
    "CALL_ORDER",
    "TRAIN_CHUNK",
    "LoopCallback",
    "eval_mark",
    "first_eval_step",
    "stop_steps",
    "train_and_evaluate",
]

#: Env steps per ``trainer.train`` call: between two calls the progress bar is
#: redrawn and other threads (Optuna's heartbeat) get the interpreter. The
#: numbers a run writes do not depend on it.
TRAIN_CHUNK = 1_000


class LoopCallback:
    """What a caller of :func:`train_and_evaluate` is told; every method does nothing here.

    Subclass and override the events you need (SB3 ``callbacks.BaseCallback``,
    trimmed to the events this loop has). A callback that only reads the trainer
    (as this package's do) leaves a run's logs and checkpoints byte for byte as
    they are without it.

    Order of calls (:data:`CALL_ORDER`), each event given to every callback in
    the order of the list before the next event::

        on_training_start
        for each chunk of at most TRAIN_CHUNK steps:
            on_train_episodes    0 or more times: the episodes the chunk logged
            on_chunk
            when the chunk reached an evaluation step:
                on_eval_episodes
                on_eval          final=False
        on_training_end
        on_eval_episodes         the final evaluation's episodes
        on_eval                  final=True

    ``on_train_episodes`` and ``on_eval_episodes`` are called only when the
    trainer has a :class:`~ember_np.TrainingRun` (they report what it writes to
    ``train_episodes.jsonl`` and ``eval_episodes.jsonl``).
    """

    def on_training_start(self, trainer: Any) -> None:
        """Before the first chunk (``trainer.agent.total_steps`` is where it starts)."""

    def on_train_episodes(self, trainer: Any, rows: list[dict[str, Any]]) -> None:
        """During a chunk: training episodes just appended to ``train_episodes.jsonl``.

        Each row is the record as written: ``total_reward``, ``length``,
        ``status``, ``extras`` (``epsilon``; ``loss`` after the first update),
        ``episode``, ``total_steps`` (the step the episode ended at) and, with
        N > 1 envs, ``env``. A compiled chunk reports its episodes together.
        """

    def on_chunk(self, trainer: Any, steps: int) -> None:
        """After a ``trainer.train`` call: ``steps`` more env steps were trained
        (with N envs, up to N - 1 more than the chunk asked for)."""

    def on_eval_episodes(self, trainer: Any, rows: list[dict[str, Any]]) -> None:
        """An evaluation's episodes as appended to ``eval_episodes.jsonl`` (``total_reward``,
        ``length``, ``status``, ``extras``, ``total_steps_at_eval``), before its ``on_eval``."""

    def on_eval(self, trainer: Any, report: EvalReport, final: bool) -> None:
        """After a greedy evaluation; ``final`` for the one after the last chunk."""

    def on_training_end(self, trainer: Any) -> None:
        """After the last chunk, before the final evaluation."""


#: The events of :class:`LoopCallback` in the order a run calls them (a chunk's
#: group repeats; ``*``: zero or more times, ``?``: when an evaluation is due).
CALL_ORDER = (
    "on_training_start",
    "(on_train_episodes* on_chunk (on_eval_episodes on_eval)?)*",
    "on_training_end",
    "on_eval_episodes",
    "on_eval",
)


def first_eval_step(total_steps: int, eval_every: int) -> int:
    """The first multiple of ``eval_every`` after ``total_steps`` (a resumed run keeps its grid)."""
    return (total_steps // eval_every + 1) * eval_every


# Where a run of N envs stops. A vector step is never cut (its N transitions are
# stored, trained on and counted together), so every stop the loop asks for (the end
# of the run, an evaluation, a checkpoint) happens at the first vector-step boundary
# at or past it, and the step counts recorded there (metadata.json, the logs, each
# evaluation's step, a seed's result.json curve) are the ones actually reached. The
# two functions below say which counts those are; the validators of result.json use
# them, so a run is never refused for where it stopped.


def stop_steps(steps: int, num_envs: int = 1, whole: bool = True) -> range:
    """The total step counts at which a run asked for ``steps`` env steps from 0 stops.

    Parameters
    ----------
    steps : int
        Env steps asked for (``--steps``), >= 1.
    num_envs : int
        Envs stepped together (``--num-envs``).
    whole : bool
        Every vector step adds ``num_envs`` transitions (one env, or a native
        env's copies, or gymnasium's SAME_STEP autoreset): the run stops at
        exactly the first multiple of ``num_envs`` at or past ``steps``. False
        (gymnasium's NEXT_STEP autoreset, where a copy's reset row adds no
        transition): anywhere from ``steps`` to ``steps + num_envs - 1``.

    Returns
    -------
    range
        The possible final totals; one value when ``whole`` (``steps`` itself
        for one env, or when ``steps`` is a multiple of ``num_envs``).
    """
    if whole:
        last = -(-steps // num_envs) * num_envs
        return range(last, last + 1)
    return range(steps, steps + num_envs)


def eval_mark(step: int, eval_every: int, num_envs: int = 1) -> int | None:
    """The multiple of ``eval_every`` a periodic evaluation at total ``step`` stands for.

    The loop evaluates after the vector step that reaches or passes a multiple
    of ``eval_every``, so that evaluation's step is at most ``num_envs - 1``
    past the largest multiple at or below it (one env: exactly on it).
    Returns that multiple, or None when no evaluation can fall at ``step``.
    """
    mark = step // eval_every * eval_every
    if mark < eval_every or step - mark >= num_envs:
        return None
    return mark


def train_and_evaluate(
    trainer: Any,
    steps: int,
    eval_every: int | None,
    eval_episodes: int,
    callbacks: Sequence[LoopCallback] = (),
    latest_every_chunk: bool = True,
) -> EvalReport:
    """Train ``steps`` more env steps in chunks, evaluating on the way and at the end.

    Chunks are at most :data:`TRAIN_CHUNK` steps and end at every multiple
    of ``eval_every`` (counted in the agent's total steps), where
    ``trainer.eval(eval_episodes)`` runs; after the last chunk a final
    evaluation runs (also when the last periodic one was at the same step:
    both are logged, as since the first release).

    With N envs stepped together a vector step is never cut: each chunk,
    evaluation and the run itself end at the first vector-step boundary at
    or past their step (:func:`stop_steps`, :func:`eval_mark`), up to N - 1
    steps later, and the steps recorded are those reached.

    Parameters
    ----------
    trainer : DqnTrainer
        What trains: its ``agent.total_steps``, ``train(n)`` and ``eval(k)``
        are used.
    steps : int
        Env steps to train, >= 0.
    eval_every : int or None
        Env steps between periodic evaluations; None: only the final one.
    eval_episodes : int
        Greedy episodes per evaluation, >= 1.
    callbacks : sequence of LoopCallback
        Told of every event, in the order :class:`LoopCallback` documents.
    latest_every_chunk : bool
        True: every chunk that ends between two numbered checkpoints brings
        the run's ``latest.npz`` up to date (a stopped process loses no step it
        trained). False: only the numbered checkpoints and the last chunk do,
        for a run that is trained again from the start if it stops (a seed of
        ``--seeds``); the files it ends with are the same.

    Returns
    -------
    EvalReport
        The final evaluation.
    """
    for callback in callbacks:
        callback.on_training_start(trainer)
    run = getattr(trainer, "run", None)
    listener = None
    if run is not None and callbacks:
        listener = _LogListener(trainer, callbacks)
        run.add_log_listener(listener)
    try:
        return _train_chunks(trainer, steps, eval_every, eval_episodes, callbacks,
                             latest_every_chunk)  # fmt: skip
    finally:
        if listener is not None and run is not None:
            run.remove_log_listener(listener)


class _LogListener:
    """Passes what the run appends to its JSONL logs on to the callbacks."""

    def __init__(self, trainer: Any, callbacks: Sequence[LoopCallback]) -> None:
        self.trainer = trainer
        self.callbacks = callbacks

    def __call__(self, log: str, rows: list[dict[str, Any]]) -> None:
        event = "on_train_episodes" if log == "train_episodes.jsonl" else "on_eval_episodes"
        for callback in self.callbacks:
            getattr(callback, event)(self.trainer, rows)


def _train_chunks(
    trainer: Any,
    steps: int,
    eval_every: int | None,
    eval_episodes: int,
    callbacks: Sequence[LoopCallback],
    latest_every_chunk: bool,
) -> EvalReport:
    """:func:`train_and_evaluate`'s loop, once its callbacks are told of the run's logs."""
    agent = trainer.agent
    end = agent.total_steps + steps
    next_eval = first_eval_step(agent.total_steps, eval_every) if eval_every else None
    while agent.total_steps < end:
        total = agent.total_steps
        chunk = min(TRAIN_CHUNK, end - total)
        if next_eval is not None:
            chunk = min(chunk, next_eval - total)
        trainer.train(chunk, save_latest=latest_every_chunk or total + chunk >= end)
        for callback in callbacks:  # the steps trained: a vector step may pass the chunk
            callback.on_chunk(trainer, agent.total_steps - total)
        if next_eval is not None and eval_every and agent.total_steps >= next_eval:
            report = trainer.eval(eval_episodes)
            for callback in callbacks:
                callback.on_eval(trainer, report, False)
            # the next multiple not yet reached: a vector step of more envs than
            # eval_every may pass several, and they get one evaluation
            next_eval = first_eval_step(agent.total_steps, eval_every)
    for callback in callbacks:
        callback.on_training_end(trainer)
    report = trainer.eval(eval_episodes)
    for callback in callbacks:
        callback.on_eval(trainer, report, True)
    return report
