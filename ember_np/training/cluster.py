"""Many seeds on a Dask cluster: one task per seed, its run directory sent back to the client.

``ember-np train ENV --seeds K --scheduler tcp://HOST:PORT`` (and
:func:`~ember_np.training.multiseed.train_seeds` with ``scheduler=``) hands
each seed to the Dask scheduler at that address as one task, instead of
training it on a local worker process. Dask's ``distributed`` is imported
here only, inside functions: without a scheduler nothing imports it.

Reading map, in call order::

    connect(address)        the client: a short connect timeout, before anything is written
    run_seeds               one task per seed (pure=False), progress events, polling
      seed_task             on a worker: one BLAS thread, malloc as in a plain process
                            (_plain_heap), train_seed into the worker's own temporary
                            directory, the files returned as bytes
      write_seed            on the client: the files under <parent>/seed_<s>/, result.json last

No shared filesystem is needed or used: a worker trains in a temporary
directory under its Dask local directory, and every file of the seed's run
comes back to the client in the task's result, which writes it under the
parent directory exactly as a local worker does (``result.json`` last, its
``run_dir`` the client's path). Each seed is the run ``ember-np train ENV
--seed s`` makes on any worker: :func:`~ember_np.training.seed_run.train_seed`
with NumPy's BLAS on one thread (the kernels' own OpenBLAS copy runs on one
already).

Faults. A worker that dies mid-seed (SIGKILL, the OOM killer, a lost
machine): the scheduler gives its task to another worker (Dask does this by
itself, up to ``distributed.scheduler.allowed-failures`` deaths per task,
default 3; ``retries`` is for exceptions, which a seed that raised would
only raise again, so it stays 0), the seed starts again from step 0 and
ends as it would have. A client that dies: its tasks are released, each
running one notices at its next chunk and stops, and ``ember-np resume
PARENT`` (with or without ``--scheduler``) trains the seeds without a
``result.json``. A scheduler that cannot be reached: :class:`ClusterError`
before the parent directory is made.

Progress: each task logs Dask events on the run's topic (``start``,
``steps`` at most every :data:`REPORT_EVERY` seconds, ``trained``); the
client counts them into one bar of all seeds' env steps. The scheduler keeps
the events, so :func:`trainings` counts afterwards how often each seed was
trained to completion.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from operator import methodcaller
from pathlib import Path, PurePosixPath
from typing import Any

from ember_np._validate import is_int
from ember_np.checkpoint import atomic_write, atomic_write_text, fsync_dir
from ember_np.training.run import LOCK_FILE
from ember_np.training.seed_run import train_seed
from ember_np.training.seeds import RESULT_FILE, SeedSpec
from ember_np.training.setup import one_line

__all__ = [
    "CONNECT_TIMEOUT",
    "REPORT_EVERY",
    "START_ATTEMPTS",
    "ClusterError",
    "SeedCancelled",
    "connect",
    "describe",
    "run_seeds",
    "seed_task",
    "topic",
    "trainings",
    "write_seed",
]

#: Seconds to reach the scheduler at most (less when Dask's
#: ``distributed.comm.timeouts.connect`` is set lower): an unreachable
#: address is an error, not a wait.
CONNECT_TIMEOUT = 10.0
#: How many times a client whose event loop did not start is made again (see ``connect``).
START_ATTEMPTS = 3
#: Seconds between two progress events of one task (at least).
REPORT_EVERY = 0.5
#: Seconds between two looks of the client at its tasks.
POLL_EVERY = 0.1


class ClusterError(Exception):
    """Dask is not installed, or the scheduler cannot be reached (a one-line message)."""


class SeedCancelled(Exception):
    """Raised in a task whose client let it go (it died, or was interrupted): stop training."""


def connect(address: str) -> Any:
    """A ``distributed.Client`` connected to the scheduler at ``address``.

    Raises
    ------
    ClusterError
        Dask's distributed is not installed (naming the pip extra), a port
        outside 1..65535 or a ``tls://`` address without a TLS configuration
        (at once, without waiting), or no scheduler answered at ``address``
        within :data:`CONNECT_TIMEOUT` seconds.
    """
    if not isinstance(address, str) or not address.strip():
        raise ClusterError(f"expected a scheduler address such as tcp://HOST:8786, "
                           f"got {address!r}")  # fmt: skip
    _check_port(address)
    try:
        import dask
        from dask.utils import parse_timedelta
        from distributed import Client
    except ImportError as exc:
        raise ClusterError(f"a Dask scheduler needs Dask's distributed ({one_line(exc)}): "
                           "pip install 'ember-np[dask]'") from None  # fmt: skip
    _check_tls(address)
    configured = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s")
    timeout = min(CONNECT_TIMEOUT, configured)
    import logging

    quiet = logging.getLogger("distributed")  # the failure is our one line, not a log
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        return _client(Client, address, timeout)
    except (ValueError, TypeError) as exc:
        error = ClusterError(f"{address!r} is not a scheduler address ({one_line(exc)}): "
                             "expected e.g. tcp://HOST:8786")  # fmt: skip
    except AssertionError:
        error = ClusterError(
            f"Dask's client did not start its event-loop thread within 10 s, {START_ATTEMPTS} "
            f"times (this machine is busy?); the scheduler at {address} was not the problem. "
            "Try again when fewer processes are running"
        )
    except (OSError, TimeoutError) as exc:
        timed_out = isinstance(exc, TimeoutError) or str(exc).startswith("Timed out")
        why = "" if timed_out else f" ({one_line(exc)})"  # Dask's timeout says it again
        error = ClusterError(
            f"no Dask scheduler answered at {address} within {timeout:g} s{why}: start one "
            "with `dask scheduler` and give the address it prints, or leave --scheduler out "
            "to train on this machine"
        )
    finally:
        quiet.setLevel(level)
    _collect_failed_clients()
    raise error  # outside the handlers: no __context__ keeps the failed client alive


def _check_port(address: str) -> None:
    """ClusterError at once when ``address``'s port is outside 1..65535 (no connection can
    reach it, and Dask would only say so after its connect timeout)."""
    location = address.strip().partition("://")[2] or address.strip()
    port = re.fullmatch(r"(?:\[[^\]]*\]|[^:\[\]/]*):(\d+)/?", location)
    if port and not 1 <= int(port[1]) <= 65535:
        raise ClusterError(f"the port of the scheduler address {address} is {int(port[1])}, "
                           "outside 1..65535: give the address `dask scheduler` prints, "
                           "e.g. tcp://HOST:8786")  # fmt: skip


def _check_tls(address: str) -> None:
    """ClusterError at once for a ``tls://`` address when Dask has no TLS configuration."""
    from distributed.security import Security

    if not address.strip().lower().startswith("tls://"):
        return
    if Security().get_connection_args("client")["ssl_context"] is None:
        raise ClusterError(
            f"{address} is a TLS scheduler address, but no TLS is configured for Dask's "
            "client: set distributed.comm.tls.ca-file, .client.cert and .client.key in "
            "Dask's configuration (e.g. the environment variables "
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT "
            "and DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY naming PEM files), or use tcp://"
        )


def _collect_failed_clients() -> None:
    """Collect the clients whose start failed, now, while none is starting.

    A ``distributed.Client`` whose constructor raised is left in reference
    cycles, so only the cyclic garbage collector frees it, at whatever
    allocation comes next. Its ``__del__`` closes it, which takes the lock
    that every ``LoopRunner`` of distributed shares (a class attribute, not
    reentrant). Collected while the next client's ``LoopRunner.start`` holds
    that lock (starting the IO-loop thread allocates, which can trigger a
    collection), it waits for it for ever in the same thread. Seen in this
    project's tests: a module's cluster fixture hung after a test had failed
    to connect. Called after the failed constructor's traceback is gone, a
    collection here runs ``__del__`` where no such lock is held.
    """
    gc.collect()


def _client(client_type: Any, address: str, timeout: float) -> Any:
    """``client_type(address)``, its start tried :data:`START_ATTEMPTS` times.

    distributed's client gives the thread of its IO loop 10 s to start and
    otherwise fails with a bare ``AssertionError`` (``distributed.utils.LoopRunner``),
    whether or not a scheduler answers. On a 2-core machine busy compiling it
    once did not start in time; that is not an unreachable scheduler, so the
    client is made again. A scheduler that does not answer is still a
    ``TimeoutError`` or ``OSError`` on the first attempt.
    """
    for _ in range(START_ATTEMPTS - 1):
        try:
            return client_type(address, timeout=timeout, set_as_default=False)
        except AssertionError:
            pass
        _collect_failed_clients()  # the failed one, before the next starts
    return client_type(address, timeout=timeout, set_as_default=False)  # the last: raises


def describe(client: Any) -> str:
    """``the Dask cluster at tcp://HOST:8786 (2 workers, 2 threads)``: the scheduler's view now."""
    threads = client.nthreads()
    return (f"the Dask cluster at {client.scheduler.address} ({len(threads)} workers, "
            f"{sum(threads.values())} threads)")  # fmt: skip


def topic(parent: str | os.PathLike[str]) -> str:
    """The Dask event topic of the multi-seed run in ``parent``."""
    return f"ember_np-seeds:{os.path.abspath(parent)}"


# -- on a worker ------------------------------------------------------------------

#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_MMAP_THRESHOLD = 128 * 1024  # glibc's default, where a set trim threshold leaves it
_heap_lock = threading.Lock()
_heap_users = [0]  # tasks of this process inside _plain_heap


def _mallopt() -> Any:
    """glibc's ``mallopt``, or None (not glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.mallopt if hasattr(libc, "gnu_get_libc_version") else None
    except OSError:
        return None


@contextmanager
def _plain_heap() -> Iterator[None]:
    """While a task trains: malloc as in a plain process, not as Dask's nanny sets it.

    The nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which makes
    glibc hand memory back to the system at every free above 64 KB and map
    every allocation above 128 KB afresh (a set trim threshold turns off
    glibc's adaptive thresholds): a seed's per-step temporaries then fault
    their pages in again and again (~30% more CPU per seed measured, ~80,000
    to ~300,000 page faults per 20,000 steps instead of ~600). Large
    thresholds while training, as the adaptive ones end up in a plain
    process; the worker's own afterwards. Numbers are unchanged: only where
    memory comes from.
    """
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_", "")
    mallopt = _mallopt() if trim.isdigit() else None
    if mallopt is None:
        yield
        return
    with _heap_lock:
        _heap_users[0] += 1
        if _heap_users[0] == 1:
            mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest adaptive value (64-bit)
            mallopt(_M_TRIM_THRESHOLD, 64 << 20)
    try:
        yield
    finally:
        with _heap_lock:
            _heap_users[0] -= 1
            if _heap_users[0] == 0:
                mallopt(_M_TRIM_THRESHOLD, int(trim))
                mallopt(_M_MMAP_THRESHOLD, _GLIBC_MMAP_THRESHOLD)


class _Reporter:
    """``on_steps`` of a task: steps so far as events; stops a task its client let go."""

    def __init__(self, worker: Any, where: str, seed: int, attempt: str, key: str) -> None:
        self.worker = worker
        self.topic = where
        self.seed = seed
        self.attempt = attempt
        self.key = key
        self.steps = 0
        self.sent = time.monotonic() - REPORT_EVERY  # the first chunk is reported at once

    def event(self, kind: str, **extra: Any) -> None:
        self.worker.log_event(self.topic, {"event": kind, "seed": self.seed,
                                           "attempt": self.attempt, **extra})  # fmt: skip

    def __call__(self, steps: int) -> None:
        self.steps += steps
        task = self.worker.state.tasks.get(self.key)
        if task is not None and task.state == "cancelled":
            raise SeedCancelled(f"seed {self.seed}: its client let it go")
        if time.monotonic() - self.sent >= REPORT_EVERY:
            self.send()

    def send(self) -> None:
        self.sent = time.monotonic()
        self.event("steps", steps=self.steps)


def seed_task(spec_data: dict[str, Any], seed: int, where: str, key: str) -> dict[str, Any]:
    """One seed on a Dask worker; returns its run directory's files and its result.

    Parameters
    ----------
    spec_data : dict
        ``SeedSpec.to_dict()`` (plain data: no pickled classes cross the wire).
    seed : int
        The seed: the run ``ember-np train ... --seed seed`` makes.
    where : str
        The event topic (:func:`topic`) of the run's progress.
    key : str
        This task's key: a task its client released stops at the next chunk.

    Returns
    -------
    dict
        ``seed``, ``attempt`` (a fresh id per try), ``result`` (the
        ``result.json`` data, its ``run_dir`` the worker's), ``dirs`` (relative
        directories, parents first) and ``files`` (relative path -> bytes,
        ``result.json`` left out: the client writes it last).
    """
    from distributed import get_worker

    from ember_np.nn._blas import set_blas_threads

    set_blas_threads(1)  # NumPy's BLAS, as every local worker: the same sums on any machine
    worker = get_worker()
    report = _Reporter(worker, where, seed, uuid.uuid4().hex, key)
    report.event("start", pid=os.getpid(), worker=worker.address)
    spec = SeedSpec.from_dict(spec_data)
    with tempfile.TemporaryDirectory(prefix=f"ember_np-seed_{seed}-",
                                     dir=worker.local_directory) as tmp:  # fmt: skip
        run_dir = Path(tmp) / f"seed_{seed}"
        with _plain_heap():
            result = train_seed(spec, seed, run_dir, report)
        report.send()
        dirs = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_dir())
        files = {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
                 if p.is_file() and p.name not in (RESULT_FILE, LOCK_FILE)}  # fmt: skip
    report.event("trained")
    return {"seed": seed, "attempt": report.attempt, "result": result.to_dict(), "dirs": dirs,
            "files": files}  # fmt: skip


# -- on the client ----------------------------------------------------------------


def write_seed(
    parent: Path, payload: dict[str, Any], seed: int | None = None, worker: str = "its worker"
) -> Path:
    """Write a finished task's run directory as ``parent/seed_<s>/``, ``result.json`` last.

    The directory must not exist (a seed trained again was renamed
    ``seed_<s>.interrupted`` by resume). Until ``result.json`` is written the
    seed counts as unfinished, so a client that dies halfway leaves a seed
    that ``ember-np resume`` trains again.

    What a worker returns is checked before anything is written: the seed must
    be ``seed`` (the one the client submitted), and every relative path must
    stay inside ``seed_<s>/`` (no absolute path, no ``..``); the worker's
    ``.lock`` is not copied. Each file is written as every checkpoint is
    (``atomic_write``: temporary file, fsync, rename, directory fsync), into
    directories made here and checked to be directories, not links.

    Parameters
    ----------
    parent : Path
        The multi-seed run's parent directory.
    payload : dict
        What :func:`seed_task` returned.
    seed : int, optional
        The seed the client submitted (default: the payload's own).
    worker : str
        Who returned ``payload``, named in the errors.

    Raises
    ------
    ClusterError
        The payload names another seed, or a path outside the seed's directory.
    OSError
        A file could not be written (the seed then has no ``result.json``).
    """
    shapes = (("result", dict), ("dirs", list), ("files", dict))
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k), t) for k, t in shapes):
        raise ClusterError(f"{worker} returned {type(payload).__name__} for seed {seed}, not "
                           "a seed's run (result, dirs, files); none was written")  # fmt: skip
    if seed is None:
        seed = payload.get("seed")
    if payload.get("seed") != seed or not is_int(seed):
        raise ClusterError(f"{worker} returned the files of seed {payload.get('seed')!r} for "
                           f"the task of seed {seed!r}; none were written")  # fmt: skip
    dirs = [_checked_rel(rel, worker, seed) for rel in payload["dirs"]]
    files = {_checked_rel(rel, worker, seed): data for rel, data in payload["files"].items()}
    target = Path(parent) / f"seed_{seed}"
    target.mkdir()  # FileExistsError if taken: never mix two runs' files
    fsync_dir(parent)
    for rel in dirs:
        _make_dirs(target, rel)
    for rel, data in files.items():
        if rel.parts == (LOCK_FILE,) or rel.parts == (RESULT_FILE,):
            continue  # the worker's lock; result.json is written last, from "result"
        if not isinstance(data, bytes):
            raise ClusterError(f"{worker} returned {type(data).__name__} for {rel} of seed "
                               f"{seed}, not bytes")  # fmt: skip
        _make_dirs(target, rel.parent)
        atomic_write(target / rel, methodcaller("write", data))  # f.write(data)
    result = {**payload["result"], "run_dir": str(target)}  # the local run's result.json
    atomic_write_text(target / RESULT_FILE, json.dumps(result, indent=1))
    return target


def _checked_rel(rel: Any, worker: str, seed: int) -> PurePosixPath:
    """``rel`` as a relative path that stays inside the seed's directory; ClusterError if not."""
    path = PurePosixPath(rel) if isinstance(rel, str) else None
    if path is None or not path.parts or path.is_absolute() or ".." in path.parts:
        raise ClusterError(
            f"{worker} returned the path {rel!r} for seed {seed}, outside seed_{seed}/ (a "
            "relative path without '..' was expected); nothing of the seed was written"
        )
    return path


def _make_dirs(target: Path, rel: PurePosixPath) -> None:
    """Make ``target/rel`` and its parents, each a directory here and not a link (ClusterError)."""
    here = target
    for part in rel.parts:
        here = here / part
        try:
            here.mkdir()
            fsync_dir(here.parent)
        except FileExistsError:
            pass
        if here.is_symlink() or not here.is_dir():
            raise ClusterError(f"{here} is a link or not a directory: the seed's files are "
                               "written only into directories made for them")  # fmt: skip


class _Progress:
    """One bar of all seeds' env steps, fed by the tasks' events (on Dask's thread)."""

    def __init__(self, spec: SeedSpec, seeds: list[int], progress: bool) -> None:
        from tqdm import tqdm

        self.lock = threading.Lock()
        self.steps: dict[int, tuple[str, int]] = {}  # seed -> (its latest attempt, its steps)
        self.where: dict[int, str] = {}  # seed -> "worker ADDRESS (pid N)" of that attempt
        self.notes: list[str] = []
        self.bar = tqdm(total=spec.steps * len(seeds), unit="step", unit_scale=True,
                        dynamic_ncols=True, disable=not progress, desc=f"{len(seeds)} seeds",
                        smoothing=0.1)  # fmt: skip

    def on_event(self, event: tuple[float, dict[str, Any]]) -> None:
        """Dask's ``subscribe_topic`` handler."""
        msg = event[1]
        seed, attempt = msg["seed"], msg["attempt"]
        with self.lock:
            current = self.steps.get(seed)
            if msg["event"] == "start":
                here = f"worker {msg['worker']} (pid {msg['pid']})"
                if current is not None and current[0] != attempt:
                    self.notes.append(
                        f"seed {seed}: its {self.where[seed]} was lost at step {current[1]:,}; "
                        f"the scheduler gave it to {here}, which trains it from the start"
                    )
                self.steps[seed] = (attempt, 0)
                self.where[seed] = here
            elif msg["event"] == "steps" and (current is None or current[0] == attempt):
                self.steps[seed] = (attempt, msg["steps"])

    def refresh(self, done: int, failed: int) -> None:
        """Redraw the bar and write the notes gathered since (on the main thread)."""
        with self.lock:
            total = sum(steps for _, steps in self.steps.values())
            notes, self.notes = self.notes, []
        for note in notes:
            self.write(note)
        if total != self.bar.n or done or failed:
            self.bar.set_postfix(done=done, failed=failed, refresh=False)
            self.bar.update(total - self.bar.n)  # down when a seed starts again

    def write(self, line: str) -> None:
        """A line on stderr above the bar."""
        self.bar.write(line, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def _why(future: Any) -> str:
    """Why a task that did not finish ended, in words."""
    if future.status == "error":
        exc = future.exception()
        if type(exc).__name__ == "KilledWorker":
            return f"its workers died while training it ({one_line(exc)})"
        return f"it raised {one_line(exc)}"
    return f"its task was {future.status} (the scheduler went away?)"


def run_seeds(
    client: Any, parent: Path, spec: SeedSpec, seeds: list[int], progress: bool
) -> list[int]:
    """Train ``seeds`` on the cluster of ``client``, each written under ``parent``; the failed.

    A seed whose task raised or whose workers kept dying is reported on
    stderr and returned; its directory is absent or has no ``result.json``.
    """
    where = topic(parent)
    bar = _Progress(spec, seeds, progress)
    client.subscribe_topic(where, bar.on_event)
    tag = uuid.uuid4().hex[:8]
    futures: dict[Any, int] = {}
    failed: list[int] = []
    done = 0
    try:
        for seed in seeds:
            key = f"ember_np-seed_{seed}-{tag}"
            future = client.submit(seed_task, spec.to_dict(), seed, where, key, key=key,
                                   pure=False, retries=0)  # fmt: skip
            futures[future] = seed
        while futures:
            for future in [f for f in futures if f.done()]:  # finished, error or cancelled
                seed = futures.pop(future)
                try:
                    if future.status != "finished":
                        raise RuntimeError(_why(future))
                    write_seed(parent, future.result(), seed, bar.where.get(seed, "its worker"))
                    done += 1
                except (RuntimeError, OSError, ClusterError) as exc:
                    failed.append(seed)
                    bar.write(f"seed {seed} did not finish: {exc}; the other seeds go on "
                              f"(ember-np resume {parent} trains it again)")  # fmt: skip
                future.release()
            bar.refresh(done, len(failed))
            time.sleep(POLL_EVERY)
    finally:
        if futures:  # interrupted: the tasks stop at their next chunk
            client.cancel(list(futures))
        client.unsubscribe_topic(where)
        bar.close()
    return failed


def trainings(client: Any, parent: str | os.PathLike[str]) -> Counter[int]:
    """How many times the cluster trained each seed of ``parent`` to the end (seed -> count).

    Read from the events the scheduler kept (``trained``, logged by each task
    after its last step); a seed the scheduler gave to a second worker after
    the first died mid-seed counts once.
    """
    return Counter(msg["seed"] for _, msg in client.get_events(topic(parent))
                   if msg.get("event") == "trained")  # fmt: skip
