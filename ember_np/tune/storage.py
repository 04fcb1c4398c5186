"""Where a tune study lives: Optuna storages (SQLite, a database server, a journal file).

:func:`open_storage` opens one with bounded waits and heartbeats,
:func:`check_storage` refuses what the workers cannot share, and
:func:`open_study` creates or joins a study whose settings must match. Every
refusal is a :class:`TuneError` (a ``ValueError``) with a one-line message,
which ``ember-np tune`` prints before exiting with status 2.

Optuna and SQLAlchemy are optional dependencies (the ``tune`` extra):
nothing here imports them at module level.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ember_np.training.setup import one_line

__all__ = [
    "CONNECT_TIMEOUT",
    "MAX_RETRY",
    "SETTINGS_ATTR",
    "STATEMENT_TIMEOUT",
    "TuneError",
    "absolute_storage",
    "check_storage",
    "driver_hint",
    "error_line",
    "local_file",
    "masked",
    "open_storage",
    "open_study",
    "recorded_storage",
    "server_timeouts",
    "write_json",
]

SETTINGS_ATTR = "ember_np.tune"  # study user attribute holding the TuneSettings
MAX_RETRY = 3  # a trial whose worker died is run again at most this often


class TuneError(ValueError):
    """A study or storage that cannot be used; its message is one line saying what to do."""


def open_storage(storage: str, heartbeat: int | None = None) -> Any:
    """An Optuna storage for ``storage``: an SQLAlchemy URL, or a journal file path (``.log``).

    With ``heartbeat`` (seconds), an RDB storage records a heartbeat per
    running trial; a trial whose heartbeat is older than 3x that is failed and
    enqueued again with the same parameters (at most ``MAX_RETRY`` times).
    Journal files have no heartbeat in Optuna: a dead worker's trial stays
    "running" there.
    """
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    check_storage(storage)
    if "://" not in storage:
        path = Path(storage)
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    kwargs: dict[str, Any] = {}
    if storage.startswith("sqlite"):
        # Workers wait for each other's writes instead of failing after SQLite's 5 s.
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    else:  # a server: a silent one fails after the timeouts instead of hanging
        kwargs["engine_kwargs"] = {"connect_args": server_timeouts(storage)}
    if heartbeat is not None:
        kwargs.update(
            heartbeat_interval=heartbeat,
            grace_period=3 * heartbeat,
        )
    with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna since 2.8
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if heartbeat is not None:
            kwargs["heartbeat_stale_trial_callback"] = RetryHeartbeatStaleTrialCallback(
                max_retry=MAX_RETRY
            )
    from sqlalchemy.exc import OperationalError

    try:
        # Commands started at once (on several machines, or a reader beside a command)
        # all create the tables; the losers of that race get an error from the
        # database: try again. Not after any other OperationalError: the server is
        # unreachable, silent or refuses us. (SQLite reports the lost race as one:
        # "table trial_params already exists".)
        for attempt in range(3):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return RDBStorage(storage, **kwargs)
            except (ImportError, ValueError):
                raise
            except Exception as exc:
                lost_race = not isinstance(exc, OperationalError) or "already exists" in str(exc)
                if not lost_race or attempt == 2:
                    raise
                time.sleep(1.0 + attempt)
        raise AssertionError("unreachable")
    except ImportError:
        raise TuneError(f"cannot open {masked(storage)}: {driver_hint(storage)}") from None
    except Exception as exc:  # SQLAlchemy's errors for bad URLs and unreachable servers
        raise TuneError(f"cannot open {masked(storage)}: {error_line(exc)}") from None


#: Seconds to open a connection to a database server (PostgreSQL, MySQL).
CONNECT_TIMEOUT = 10
#: Seconds one statement may run on a database server (as long as SQLite waits for a lock).
STATEMENT_TIMEOUT = 120

#: The pip package of each SQLAlchemy driver (the module SQLAlchemy imports for it).
DRIVER_PACKAGES = {
    "psycopg2": "psycopg2-binary", "psycopg": "'psycopg[binary]'", "pg8000": "pg8000",
    "asyncpg": "asyncpg", "pymysql": "PyMySQL", "mysqldb": "mysqlclient",
    "mysqlconnector": "mysql-connector-python", "mariadbconnector": "mariadb",
    "cx_oracle": "cx_Oracle", "oracledb": "oracledb", "pyodbc": "pyodbc",
}  # fmt: skip


def server_timeouts(storage: str) -> dict[str, Any]:
    """The DBAPI connect arguments that bound a connection's and a statement's wait.

    Options already in the URL's query (``?connect_timeout=30``) are kept.
    """
    from sqlalchemy.engine import make_url

    url = make_url(storage)
    backend, driver = url.get_backend_name(), url.get_driver_name()
    args: dict[str, Any] = {}
    if backend == "postgresql" and driver in ("psycopg2", "psycopg"):
        args = {"connect_timeout": CONNECT_TIMEOUT,
                "options": f"-c statement_timeout={STATEMENT_TIMEOUT * 1000}"}  # fmt: skip
    elif backend == "postgresql" and driver == "pg8000":
        args = {"timeout": STATEMENT_TIMEOUT}
    elif backend in ("mysql", "mariadb") and driver in ("pymysql", "mysqldb"):
        args = {"connect_timeout": CONNECT_TIMEOUT, "read_timeout": STATEMENT_TIMEOUT,
                "write_timeout": STATEMENT_TIMEOUT}  # fmt: skip
    return {k: v for k, v in args.items() if k not in url.query}


def driver_hint(storage: str) -> str:
    """What to install for a storage URL whose database driver is missing."""
    from sqlalchemy.engine import make_url

    url = make_url(storage)
    driver = url.get_driver_name()
    package = DRIVER_PACKAGES.get(driver.lower(), driver)
    backend = url.get_backend_name()
    return (f"its driver {driver!r} is not installed: pip install {package} "
            f"(or name another driver in the URL, {backend}+DRIVER://...)")  # fmt: skip


def error_line(exc: BaseException) -> str:
    """A database error on one line: the driver's own message, without SQLAlchemy's links."""
    return one_line(getattr(exc, "orig", None) or exc)


def check_storage(storage: str) -> None:
    """Refuse a storage the workers cannot share, with what to give instead."""
    if "://" not in storage and not storage.endswith(".log"):
        raise TuneError(
            f"--storage must be an SQLAlchemy URL (sqlite:///FILE.db, "
            f"postgresql+psycopg2://USER@HOST/DB, mysql+pymysql://...) or an Optuna journal "
            f"file ending in .log, got {storage!r}"
        )
    if "://" not in storage:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(storage)
    except ArgumentError:
        raise TuneError(
            f"--storage {masked(storage)} is not an SQLAlchemy URL: use sqlite:///FILE.db, "
            "postgresql+psycopg2://USER@HOST/DB or mysql+pymysql://USER@HOST/DB"
        ) from None
    memory = url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"
    if url.get_backend_name() == "sqlite" and memory:
        raise TuneError(
            f"--storage {storage} is an in-memory SQLite database, which each worker process "
            "would have its own of: give a file, e.g. sqlite:///tunes/study.db"
        )


def absolute_storage(storage: str) -> str:
    """``storage`` with a relative SQLite or journal file made absolute (against the cwd).

    A tune directory records this form, so it names the same study from any directory.
    """
    if "://" not in storage:
        return str(Path(storage).resolve())
    if not storage.startswith("sqlite"):
        return storage
    from sqlalchemy.engine import make_url

    url = make_url(storage)
    if url.database is None:  # sqlite:// (in memory): no file to make absolute
        return storage
    path = Path(url.database)
    if path.is_absolute():
        return storage
    return url.set(database=str(path.resolve())).render_as_string(hide_password=False)


def local_file(storage: str) -> Path | None:
    """The file an SQLite URL or a journal path names; None for a database server."""
    if "://" not in storage:
        return Path(storage)
    if not storage.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(storage).database
    return None if database is None else Path(database)  # sqlite://: in memory


def masked(storage: str) -> str:
    """The storage URL with any password replaced by ***."""
    if "://" not in storage or "@" not in storage:
        return storage
    scheme, rest = storage.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in credentials else ''}@{host}"


def open_study(storage: Any, name: str, settings: Any | None) -> Any:
    """Create or join study ``name``; with ``settings``, check they match the study's."""
    import optuna

    if settings is None:
        try:
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            raise TuneError(f"no study {name!r} in that storage (check --study)") from None
    else:
        study = optuna.create_study(
            study_name=name, storage=storage, direction="maximize", load_if_exists=True
        )
        stored = study.user_attrs.get(SETTINGS_ATTR)
        mine = settings.to_dict()
        if stored is None:
            study.set_user_attr(SETTINGS_ATTR, mine)
        elif stored != mine:
            diff = sorted(k for k in mine if stored.get(k) != mine[k])
            details = "; ".join(f"{k}: study {stored.get(k)!r}, here {mine[k]!r}" for k in diff)
            raise TuneError(
                f"study {name!r} was created with other settings ({details}): run the same "
                "command as its other workers, or choose another --study"
            )
    if SETTINGS_ATTR not in study.user_attrs:
        raise TuneError(f"study {name!r} was not made by ember-np tune")
    return study


def recorded_storage(stored: str, tune_dir: Path, info_path: Path) -> str:
    """The storage a tune.json names, independent of the current directory.

    Since this version tune.json holds absolute paths. Older versions wrote
    their default ``sqlite:///<--dir as given>/study.db`` relative to the
    directory tune ran in: that one is found in the tune directory itself when
    the tune directory's path ends with the recorded one; any other relative
    path is refused (it would name whatever file the current directory has).
    """
    local = local_file(stored)
    if local is None or local.is_absolute():
        return stored
    here = tune_dir.resolve()
    recorded = local.parent.parts
    if (stored.startswith("sqlite") and local.name == "study.db" and recorded
            and here.parts[-len(recorded):] == recorded):  # fmt: skip
        return f"sqlite:///{here / local.name}"
    raise TuneError(
        f"{info_path} names {stored}, relative to the directory tune ran in, which is not "
        f"known: write the file's absolute path into {info_path}"
    )


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    from ember_np.checkpoint import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
