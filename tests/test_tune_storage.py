"""``ember-np tune`` storages: where a tune directory's study is, and how bad storages fail.

A tune directory names its study by absolute path, so ``report`` and
``--show`` find the same study from any directory, and never create a
database; storages the workers cannot use, missing drivers and silent
database servers fail with one line.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from ember_np.cli import build_parser, main  # noqa: E402
from ember_np.training.setup import SetupError  # noqa: E402
from ember_np.tune import storage as tune_storage  # noqa: E402

TINY = ["--steps", "3000", "--seeds", "2", "--evals", "3", "--eval-episodes", "3",
        "--set", "hidden_sizes=[32]", "train_freq=4", "gradient_steps=1", "batch_size=32",
        "--quiet", "--workers", "1", "--sampler", "random"]  # fmt: skip


def test_an_in_memory_sqlite_url_names_no_file():
    """``sqlite://`` (no database: in memory) is left as it is and names no file, where
    both raised TypeError (Path(None))."""
    assert tune_storage.absolute_storage("sqlite://") == "sqlite://"
    assert tune_storage.local_file("sqlite://") is None
    assert tune_storage.local_file("sqlite:///a/b.db") == Path("a/b.db")


def test_report_finds_a_tune_directorys_own_study_from_any_directory(tmp_path, monkeypatch,
                                                                      capsys):  # fmt: skip
    a, b = tmp_path / "a", tmp_path / "b"
    for where, trials in ((a, "1"), (b, "2")):  # the same env (so the same study name) twice
        where.mkdir()
        monkeypatch.chdir(where)
        assert main(["tune", "CartPole-v1", "--trials", trials, *TINY]) == 0
    first = a / "tunes" / "CartPole-v1"
    info = json.loads((first / "tune.json").read_text())
    assert info["storage"] == f"sqlite:///{first.resolve() / 'study.db'}"  # absolute
    preset = (first / "best_preset.json").read_bytes()
    capsys.readouterr()
    # from b, whose tunes/CartPole-v1/study.db holds the 2-trial study
    assert main(["report", str(first)]) == 0
    assert "study CartPole-v1: 1 complete" in capsys.readouterr().out
    assert (first / "best_preset.json").read_bytes() == preset
    # a tune.json as older versions wrote it: relative to the directory tune ran in
    info["storage"] = "sqlite:///tunes/CartPole-v1/study.db"
    (first / "tune.json").write_text(json.dumps(info))
    assert main(["report", str(first)]) == 0
    assert "study CartPole-v1: 1 complete" in capsys.readouterr().out
    assert (first / "best_preset.json").read_bytes() == preset


def test_report_never_creates_a_database(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tune_dir = tmp_path / "t"
    tune_dir.mkdir()
    info = {"study": "CartPole-v1", "settings": {"env_id": "CartPole-v1"}}
    for storage in (f"sqlite:///{tmp_path / 'gone' / 'study.db'}",  # absolute, missing
                    "sqlite:///t/study.db",  # old relative form, missing
                    "sqlite:///elsewhere.db",  # relative, not the old default: unknowable
                    str(tmp_path / "gone.log")):  # fmt: skip
        (tune_dir / "tune.json").write_text(json.dumps({**info, "storage": storage}))
        assert main(["report", str(tune_dir)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("no study database" in err or "absolute path" in err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["t", "tune.json"]


def test_a_masked_password_asks_for_the_url_with_a_command_that_exists(tmp_path, capsys):
    tune_dir = tmp_path / "t"
    tune_dir.mkdir()
    (tune_dir / "tune.json").write_text(json.dumps({
        "study": "s", "storage": "postgresql+psycopg2://tune:***@db.example/t",
        "settings": {"env_id": "CartPole-v1"}}))  # fmt: skip
    assert main(["report", str(tune_dir)]) == 2
    err = capsys.readouterr().err
    command = f"ember-np tune CartPole-v1 --dir {tune_dir} --show --storage FULL_URL"
    assert command in err and err.count("\n") == 1
    args = build_parser().parse_args(command.split()[1:])  # report has no --storage; tune has
    assert args.show and args.storage == "FULL_URL"


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_sqlite_storage_is_refused(tmp_path, capsys, url):
    assert main(["tune", "CartPole-v1", "--dir", str(tmp_path / "t"), "--storage", url]) == 2
    err = capsys.readouterr().err
    assert "in-memory" in err and "sqlite:///" in err and err.count("\n") == 1
    assert not (tmp_path / "t").exists()


def test_a_missing_driver_names_its_own_package(tmp_path, capsys):
    pytest.importorskip("sqlalchemy")
    try:
        import pymysql  # noqa: F401

        pytest.skip("PyMySQL is installed here")
    except ImportError:
        pass
    url = "mysql+pymysql://tune:hunter2@127.0.0.1:1/t"
    assert main(["tune", "CartPole-v1", "--dir", str(tmp_path / "t"), "--storage", url]) == 2
    err = capsys.readouterr().err
    assert "pip install PyMySQL" in err and "PostgreSQL" not in err and "psycopg" not in err
    assert "hunter2" not in err and err.count("\n") == 1


def test_fixing_a_small_buffer_is_checked_against_the_search_not_the_defaults():
    from optuna.samplers import RandomSampler

    from ember_np.cli.tune import settings_from_args
    from ember_np.tune import suggest_config

    # FrozenLake has no preset: DqnConfig's default min_replay_size (10,000) is searched
    args = build_parser().parse_args(["tune", "FrozenLake-v1", "--set", "buffer_capacity=500"])
    settings = settings_from_args(args)
    assert settings.fixed == {"buffer_capacity": 500}
    study = optuna.create_study(sampler=RandomSampler(seed=0))
    for _ in range(200):  # every sample is a valid config with the fixed buffer
        trial = study.ask()
        config = suggest_config(trial, settings)
        assert config.buffer_capacity == 500
        assert config.batch_size <= config.min_replay_size <= 500
        study.tell(trial, 0.0)
    # what is fixed is still checked
    bad = build_parser().parse_args(["tune", "FrozenLake-v1", "--set", "buffer_capacity=500",
                                     "min_replay_size=600"])  # fmt: skip
    with pytest.raises(SetupError, match="min_replay_size"):
        settings_from_args(bad)


def test_a_database_server_that_never_answers_fails_with_one_line(tmp_path, monkeypatch,
                                                                  capsys):  # fmt: skip
    pytest.importorskip("psycopg2")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []

    def accept_and_say_nothing():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    monkeypatch.setattr(tune_storage, "CONNECT_TIMEOUT", 1)
    port = server.getsockname()[1]
    url = f"postgresql+psycopg2://tune:hunter2@127.0.0.1:{port}/t"
    result = []
    command = threading.Thread(
        target=lambda: result.append(
            main(["tune", "CartPole-v1", "--dir", str(tmp_path / "t"), "--storage", url])
        ),
        daemon=True,
    )
    command.start()
    command.join(30)
    try:
        assert not command.is_alive(), "tune still waits for a server that never answers"
        assert result == [2] and held  # it did connect
        err = capsys.readouterr().err
        assert "timeout" in err and err.count("\n") == 1 and "hunter2" not in err
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize("lost", [True, False])
def test_sqlite_losing_the_race_to_create_the_tables_tries_again(tmp_path, monkeypatch, lost):
    """Two processes opening a new SQLite study at once both create its tables; SQLite
    tells the loser with an OperationalError ("table ... already exists"), which is tried
    again. Any other OperationalError (a file that cannot be opened) fails at once."""
    import optuna.storages
    from sqlalchemy.exc import OperationalError

    real = optuna.storages.RDBStorage
    calls = []
    why = "table trial_params already exists" if lost else "unable to open database file"

    def first_call_fails(url, **kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(url)
        if len(calls) == 1:
            raise OperationalError("CREATE TABLE trial_params (...)", {}, Exception(why))
        return real(url, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", first_call_fails)
    url = f"sqlite:///{tmp_path}/study.db"
    if lost:
        storage = tune_storage.open_storage(url)
        assert len(calls) == 2 and storage.get_all_studies() == []
    else:
        with pytest.raises(tune_storage.TuneError, match="unable to open database file"):
            tune_storage.open_storage(url)
        assert len(calls) == 1
