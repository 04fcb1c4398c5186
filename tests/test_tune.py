"""``ember-np tune``: Optuna studies on SQLite and PostgreSQL, with real worker processes.

Trials are tiny (a few thousand CartPole steps, a 32-unit network) so each
study takes seconds; what is checked is the machinery: trial counts, shared
studies, reproducible objective values, a killed worker's trial retried, and
the preset a study writes.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState  # noqa: E402

from ember_np import DqnConfig  # noqa: E402
from ember_np.cli import main  # noqa: E402
from ember_np.dqn.config import SCHEDULE_FIELDS  # noqa: E402
from ember_np.stats import iqm  # noqa: E402
from ember_np.tune import (  # noqa: E402
    TuneSettings,
    evaluate_config,
    open_storage,
    suggest_config,
    trial_seeds,
)

REPO = Path(__file__).resolve().parent.parent
# Fixing the costly fields keeps every trial about equally cheap (~0.3 s).
TINY = ["--steps", "3000", "--seeds", "2", "--evals", "3", "--eval-episodes", "3",
        "--set", "hidden_sizes=[32]", "train_freq=4", "gradient_steps=1", "batch_size=32",
        "--quiet"]  # fmt: skip


def tune(tmp_path, *args):
    return main(["tune", "CartPole-v1", "--dir", str(tmp_path / "tune"), *TINY, *args])


def load(tmp_path, name="CartPole-v1"):
    storage = open_storage(f"sqlite:///{tmp_path / 'tune' / 'study.db'}")
    return optuna.load_study(study_name=name, storage=storage)


def states(study):
    return [t.state for t in study.get_trials(deepcopy=False)]


def settings(steps=3000, fixed=None, base=None):
    """A study's settings: K=2 seeds, E=3 evaluations of 3 episodes on the compiled CartPole."""
    from ember_np.training.spec import RunSpec

    fixed = {"hidden_sizes": [32], "train_freq": 4, "gradient_steps": 1, "batch_size": 32} if (
        fixed is None) else fixed  # fmt: skip
    config = DqnConfig.from_dict(base) if base is not None else DqnConfig()
    run = RunSpec("ember_np/CartPole-v1", config=config, steps=steps, eval_episodes=3)
    return TuneSettings("CartPole-v1", run, 2, 3, 0, fixed)


# -- without Optuna ---------------------------------------------------------------


def test_without_optuna_the_command_says_how_to_install_and_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` raises ImportError
    assert main(["tune", "CartPole-v1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == 'ember-np tune needs Optuna: pip install "ember-np[tune]"'


# -- search space and seeds -------------------------------------------------------


@pytest.mark.parametrize("steps", [1_000, 50_000, 2_000_000])
def test_every_sample_of_the_search_space_is_a_valid_config(steps):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=steps))
    s = settings(steps=steps, fixed={}, base=DqnConfig().to_dict())
    seen = set()
    for _ in range(300):
        trial = study.ask()
        config = suggest_config(trial, s)  # DqnConfig validates on construction
        p = trial.params
        seen.update((k, v) for k, v in p.items() if not isinstance(v, float))
        assert config.learning_rate == p["learning_rate"] and 1e-5 <= p["learning_rate"] <= 1e-2
        assert config.hidden_sizes == (p["width"],) * p["depth"]
        assert config.gradient_steps == max(p["train_freq"] // p["subsample_steps"], 1)
        assert config.epsilon_decay_steps == int(p["exploration_fraction"] * steps)
        assert config.batch_size <= config.min_replay_size <= config.buffer_capacity
        assert config.min_replay_size >= min(int(p["learning_starts_fraction"] * steps),
                                             config.buffer_capacity)  # fmt: skip
        study.tell(trial, 0.0)
    assert {("depth", 1), ("depth", 3), ("double_dqn", True), ("train_freq", 256)} <= seen
    # The Rainbow switches are searched exactly when DqnConfig has them.
    fields = {f.name for f in dataclasses.fields(DqnConfig)}
    for switch in ("n_step", "prioritized_replay", "dueling"):
        assert (switch in p) == (switch in fields)


def test_fixed_fields_are_not_searched():
    study = optuna.create_study()
    trial = study.ask()
    config = suggest_config(trial, settings())
    assert config.hidden_sizes == (32,) and config.train_freq == 4 and config.batch_size == 32
    assert config.gradient_steps == 1
    assert not {"width", "depth", "train_freq", "subsample_steps", "batch_size"} & set(trial.params)


def test_trial_seeds_come_from_the_study_seed_and_the_parameters_only():
    params = {"learning_rate": 1e-3, "gamma": 0.99, "width": 64}
    seeds = trial_seeds(0, params, 5)
    assert seeds == trial_seeds(0, dict(reversed(list(params.items()))), 5)  # order-free
    assert len(set(seeds)) == 5 and all(0 <= s < 2**32 for s in seeds)
    assert trial_seeds(1, params, 5) != seeds
    assert trial_seeds(0, {**params, "learning_rate": 1.0001e-3}, 5) != seeds
    assert trial_seeds(0, params, 3) == seeds[:3]


def test_objective_is_the_iqm_of_the_seeds_final_evaluations_and_reports_each_evaluation():
    s = settings()
    config = DqnConfig.from_dict({**s.base, **s.fixed, "min_replay_size": 32})
    reports = []
    scores = evaluate_config(s, config, [3, 4], lambda step, v: reports.append((step, v)) or False)
    assert [step for step, _ in reports] == [1000, 2000]  # every evaluation but the final one
    assert len(scores) == 2 and all(8.0 <= x <= 500.0 for x in scores)
    # the same seeds give the same scores (bit-identical training), in any order of calls
    again = evaluate_config(s, config, [3, 4])
    assert again == scores
    # one seed on its own trains exactly as it did beside the other
    assert evaluate_config(s, config, [4]) == scores[1:]
    with pytest.raises(optuna.TrialPruned):
        evaluate_config(s, config, [3], lambda step, v: True)
    assert iqm(scores) == pytest.approx(sum(scores) / 2)


# -- the worker loop, in this process ---------------------------------------------


def test_worker_reports_each_evaluation_and_the_pruner_stops_trials():
    from ember_np.tune import work

    # ThresholdPruner(lower=1e9) prunes every trial at its first report.
    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.ThresholdPruner(lower=1e9))  # fmt: skip
    assert work(study, settings(), n_trials=2, quiet=True) == 2
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.PRUNED] * 2
    assert all(list(t.intermediate_values) == [1000] for t in trials)  # steps 3000 / 3 evals


def test_trials_whose_buffers_do_not_fit_in_memory_are_pruned_before_training(monkeypatch, capsys):
    import ember_np._memory as memory
    from ember_np.dqn.replay import transition_dtype
    from ember_np.training.setup import SetupError
    from ember_np.tune import work

    row = transition_dtype(4, 2).itemsize  # CartPole: 4 observations, 2 actions
    capacity = DqnConfig().buffer_capacity
    # Room for one seed's buffer but not for the trial's two, side by side.
    monkeypatch.setattr(memory, "available_memory", lambda: int(1.5 * capacity * row))
    s = settings(fixed={"hidden_sizes": [32], "buffer_capacity": capacity})
    with pytest.raises(SetupError, match=r"needs .* for 2 replay buffers"):
        evaluate_config(s, DqnConfig(hidden_sizes=[32], buffer_capacity=capacity), [3, 4])
    study = optuna.create_study(direction="maximize")
    assert work(study, s, n_trials=2, quiet=False) == 2  # the search goes on
    assert states(study) == [TrialState.PRUNED] * 2
    out = capsys.readouterr().out
    assert out.count("pruned before training") == 2 and "2 replay buffers" in out


def test_trials_beyond_the_count_end_at_once_as_surplus():
    from ember_np.tune import SurplusTrial, objective_for, work

    study = optuna.create_study(direction="maximize")
    for _ in range(2):
        study.ask()  # two trials running elsewhere
    # Without a heartbeat nobody can tell whether they finish: the worker leaves.
    assert work(study, settings(), n_trials=2, quiet=True) == 0
    assert len(study.trials) == 2
    # A trial started anyway (two workers racing) ends before it samples anything.
    with pytest.raises(SurplusTrial):
        study.optimize(objective_for(settings(), 2, quiet=True), n_trials=1)
    third = study.trials[2]
    assert third.state == TrialState.FAIL and third.user_attrs == {"surplus": True}
    assert third.params == {}


# -- studies on SQLite, with worker processes ------------------------------------


@pytest.fixture(scope="module")
def first_study(tmp_path_factory):
    """A 3-trial study run by one worker process (shared by the tests below, in order)."""
    tmp_path = tmp_path_factory.mktemp("tune")
    assert tune(tmp_path, "--trials", "3", "--workers", "1", "--sampler", "random") == 0
    return tmp_path


def test_sqlite_study_reaches_its_trial_count(first_study):
    study = load(first_study)
    finished = [s for s in states(study) if s in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 3 == len(states(study))
    info = json.loads((first_study / "tune" / "tune.json").read_text())
    assert info["settings"]["train_env_id"] == "ember_np/CartPole-v1"
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        assert t.value == iqm(t.user_attrs["scores"]) and len(t.user_attrs["scores"]) == 2


def test_show_prints_the_best_trials_and_importances(first_study, capsys):
    assert main(["tune", "CartPole-v1", "--dir", str(first_study / "tune"), "--show"]) == 0
    out = capsys.readouterr().out
    # (the median pruner waits for 5 finished trials, so none of the 3 was pruned)
    assert "study CartPole-v1: 3 complete, 0 pruned, 0 failed" in out
    assert "best " in out and "hyperparameter importance (PED-ANOVA" in out
    best = load(first_study).best_trial
    assert f"trial {best.number:>4}  IQM {best.value:9.2f}" in out


def test_report_on_a_tune_directory_shows_the_study(first_study, capsys):
    assert main(["report", str(first_study / "tune")]) == 0
    out = capsys.readouterr().out
    assert "study CartPole-v1: 3 complete, 0 pruned, 0 failed" in out
    best = load(first_study).best_trial
    assert f"trial {best.number:>4}  IQM {best.value:9.2f}" in out


def test_joining_with_other_settings_is_refused(first_study, capsys):
    assert tune(first_study, "--trials", "4", "--workers", "1", "--seed", "7") == 2
    err = capsys.readouterr().err
    assert "other settings (seed: study 0, here 7)" in err and "another --study" in err
    assert len(load(first_study).trials) == 3  # nothing ran, nothing changed


def test_best_preset_trains_through_train_preset(first_study):
    preset_file = first_study / "tune" / "best_preset.json"
    preset = json.loads(preset_file.read_text())
    assert preset["dqn"] == load(first_study).best_trial.user_attrs["config"]
    assert preset["env_id"] == "CartPole-v1" and preset["steps"] == 3000
    code = main(["train", "CartPole-v1", "--preset", str(preset_file), "--steps", "600",
                 "--eval-every", "300", "--eval-episodes", "1",
                 "--root", str(first_study / "runs"), "--quiet"])  # fmt: skip
    assert code == 0
    (run_dir,) = (first_study / "runs" / "CartPole-v1" / "best_preset").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    # the schedule lengths as fractions of the trials' 3,000 steps, scaled to the run's 600
    schedule = preset["schedule"]
    assert set(schedule) == set(SCHEDULE_FIELDS)  # none fixed with --set in TINY
    assert all(preset["dqn"][k] == round(f * 3000) for k, f in schedule.items())
    scaled = {k: max(round(f * 600), 1) if f > 0 else 0 for k, f in schedule.items()}
    assert config["dqn"] == {**preset["dqn"], **scaled} and config["steps"] == 600


def test_trials_start_from_the_preset_with_its_schedule_scaled_to_the_budget():
    from ember_np.presets import get_preset
    from ember_np.tune import best_preset, settings_for
    from ember_np.tune.storage import SETTINGS_ATTR

    s = settings_for("CartPole-v1", (1200, 2, 3, 3), 0, ["epsilon_decay_steps=500"],
                     say=lambda _: None)  # fmt: skip
    rainbow = get_preset("rainbow", "CartPole-v1")
    assert s.base == rainbow.config_for(1200).to_dict()
    assert s.base["learning_rate_decay_steps"] == 1200  # annealed over the trial, not 35,000
    assert s.fixed == {"epsilon_decay_steps": 500}
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(SETTINGS_ATTR, s.to_dict())
    trial = optuna.trial.create_trial(
        value=1.0, user_attrs={"config": rainbow.config_for(1200).replace(
            epsilon_decay_steps=500).to_dict()})  # fmt: skip
    study.add_trial(trial)
    written = best_preset(study)
    # the --set length stays a step count; the others are fractions of the 1,200 steps
    beta = round(100 / 35 * 1200)  # rainbow's beta lasts 100,000 of its 35,000 steps
    assert written["schedule"] == {"learning_rate_decay_steps": 1.0, "per_beta_steps": beta / 1200}
    assert written["dqn"]["epsilon_decay_steps"] == 500


def test_two_workers_share_the_study_and_same_parameters_give_the_same_value(first_study):
    # The best parameters enqueued twice run in the two new worker processes of a
    # second command, and give the best trial's value again, twice (the
    # reproducibility bar).
    study = load(first_study)
    best = study.best_trial
    for _ in range(2):
        study.enqueue_trial(best.params)
    assert tune(first_study, "--trials", "5", "--workers", "2", "--pruner", "none") == 0
    trials = load(first_study).get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 5
    repeats = [t for t in trials[3:] if t.params == best.params]
    assert len(repeats) == 2 and all(t.state == TrialState.COMPLETE for t in repeats)
    assert [t.value for t in repeats] == [best.value, best.value]
    assert [t.user_attrs["seeds"] for t in repeats] == [best.user_attrs["seeds"]] * 2
    # in processes other than the best trial's; not necessarily one each: a worker still
    # starting (a cold compile) can leave both to the other
    assert best.user_attrs["worker"] not in {t.user_attrs["worker"] for t in repeats}


def test_bad_arguments_fail_with_one_line_before_anything_is_created(tmp_path, capsys):
    where = ["--dir", str(tmp_path / "t")]
    assert main(["tune", "CartPole-v1", *where, "--storage", str(tmp_path / "x.txt")]) == 2
    assert "SQLAlchemy URL" in capsys.readouterr().err
    assert main(["tune", "NoSuchEnv-v0", *where]) == 2
    assert "unknown environment 'NoSuchEnv-v0'" in capsys.readouterr().err
    assert main(["tune", "CartPole-v1", *where, "--set", "gamma=2"]) == 2
    assert "gamma must be a number in [0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
    assert main(["tune", "CartPole-v1", "--dir", str(tmp_path / "none"), "--show"]) == 2
    assert "no tune directory" in capsys.readouterr().err


def test_storage_passwords_are_never_printed_or_stored():
    from ember_np.tune.storage import masked

    assert masked("postgresql+psycopg2://tune:s3cr:et@db.example:5432/t") == (
        "postgresql+psycopg2://tune:***@db.example:5432/t"
    )
    assert masked("postgresql://tune@db/t") == "postgresql://tune@db/t"
    assert masked("sqlite:///tunes/x/study.db") == "sqlite:///tunes/x/study.db"


def test_journal_file_storage(tmp_path):
    journal = tmp_path / "study.log"
    assert tune(tmp_path, "--trials", "2", "--workers", "2", "--storage", str(journal)) == 0
    study = optuna.load_study(study_name="CartPole-v1", storage=open_storage(str(journal)))
    done = [s for s in states(study) if s in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 2


def test_a_plain_dqn_config_json_is_a_preset_too(tmp_path):
    from ember_np.presets import get_preset

    path = tmp_path / "mine.json"
    config = DqnConfig(hidden_sizes=(16,), batch_size=8, min_replay_size=8)
    path.write_text(json.dumps(config.to_dict()))
    preset = get_preset(str(path))
    assert preset.config == config and preset.name == "mine" and preset.steps == 100_000


def test_bad_preset_files_are_refused_with_the_file_named(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    for text, problem in [("{", "not valid JSON"), ("[1]", "JSON object"),
                          ('{"dqn": {"gamma": 2}}', "gamma must be"),
                          ('{"learning_rte": 1}', "unknown DqnConfig field")]:  # fmt: skip
        bad.write_text(text)
        assert main(["train", "CartPole-v1", "--preset", str(bad), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and problem in err
    assert main(["train", "CartPole-v1", "--preset", str(tmp_path / "no.json")]) == 2
    assert "cannot read preset file" in capsys.readouterr().err


# -- PostgreSQL, three workers, one killed -----------------------------------------

PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres():
    """A PostgreSQL server on a free loopback port, its data and socket in a temporary dir."""
    if not PG_BIN:
        pytest.skip("PostgreSQL binaries not installed (apt-get install postgresql)")
    bindir = Path(PG_BIN[-1]).parent
    # Not under pytest's tmp_path: as root that sits in a directory only root may enter.
    root = Path(tempfile.mkdtemp(prefix="ember_np_pg_"))
    prefix = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            user = pwd.getpwnam("nobody")
        os.chown(root, user.pw_uid, user.pw_gid)
        prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                  "--clear-groups", "--"]  # fmt: skip
    port = _free_port()
    data, log = root / "data", root / "server.log"
    env = dict(os.environ, LC_ALL="C.UTF-8")

    def run(*cmd):
        out = subprocess.run([*prefix, *cmd], capture_output=True, env=env, timeout=120, cwd=root)
        assert out.returncode == 0, f"{cmd[0]}: {out.stderr.decode()}{out.stdout.decode()}"

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "tune", "--auth=trust", "-E", "UTF8")
        options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={root}"
        run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start")
        try:
            import psycopg2

            conn = psycopg2.connect(host="127.0.0.1", port=port, user="tune", dbname="postgres")
            conn.autocommit = True
            conn.cursor().execute("CREATE DATABASE tune")
            conn.close()
            yield f"postgresql+psycopg2://tune@127.0.0.1:{port}/tune"
        finally:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_postgres_three_workers_one_killed_mid_trial_ends_with_exactly_the_trials(
    tmp_path, postgres
):
    n = 4
    # Three commands, as if on three machines; each its own session, so one can be
    # killed whole (the command and its worker process) with SIGKILL.
    cmd = [sys.executable, "-m", "ember_np", "tune", "CartPole-v1", "--storage", postgres,
           "--study", "pg", "--trials", str(n), "--workers", "1", "--pruner", "none",
           "--heartbeat", "1", *TINY[:-1], "--steps", "6000"]  # fmt: skip
    procs = [
        subprocess.Popen([*cmd, "--dir", str(tmp_path / f"m{i}")], cwd=tmp_path,
                         start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for i in range(3)
    ]  # fmt: skip
    storage = open_storage(postgres)  # retries while the commands race to create the tables
    victim, killed = None, None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            study = optuna.load_study(study_name="pg", storage=storage)
        except KeyError:
            continue
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            pid = int(t.user_attrs.get("worker", ":0").rsplit(":", 1)[1])
            # A trial after the first (kernels loaded, mid-study), training (seeds drawn).
            if not pid or t.number < 1 or "seeds" not in t.user_attrs:
                continue
            try:
                victim = next(p for p in procs if os.getpgid(pid) == p.pid)
            except ProcessLookupError:
                continue  # that worker just ended
            # Stopped, the worker cannot finish the trial between this look and the
            # kill (it once did: its trial was COMPLETE, not FAIL); a trial that ended
            # before the stop (a commit in flight is given 0.2 s) is let go.
            os.killpg(victim.pid, signal.SIGSTOP)
            time.sleep(0.2)
            if study.get_trials(deepcopy=False)[t.number].state != TrialState.RUNNING:
                os.killpg(victim.pid, signal.SIGCONT)
                victim = None
                break
            os.killpg(victim.pid, signal.SIGKILL)
            killed = t.number
            break
    if killed is None:  # say what the commands did instead
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        said = [(p.returncode, p.communicate(timeout=60)[1].decode()[-1500:]) for p in procs]
        try:
            states = [t.state.name for t in optuna.load_study(
                study_name="pg", storage=storage).get_trials(deepcopy=False)]  # fmt: skip
        except KeyError:
            states = "no study"
        pytest.fail(f"no trial was seen running within 120 s; trials: {states}; "
                    f"the commands' exit codes and stderr: {said}")  # fmt: skip
    for p in procs:
        out, err = p.communicate(timeout=180)
        if p is not victim:
            assert p.returncode == 0, err.decode()[-2000:]
    study = optuna.load_study(study_name="pg", storage=storage)
    trials = study.get_trials(deepcopy=False)
    by_state = {s: [t for t in trials if t.state == s] for s in TrialState}
    assert len(by_state[TrialState.COMPLETE]) == n
    assert not by_state[TrialState.RUNNING] and not by_state[TrialState.WAITING]
    dead = trials[killed]
    assert dead.state == TrialState.FAIL and not dead.user_attrs.get("surplus")
    # its retry ran the same parameters to completion, once
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == dead.params
    # every complete trial has its own parameters' seeds
    for t in by_state[TrialState.COMPLETE]:
        assert t.user_attrs["seeds"] == trial_seeds(0, t.params, 2)


def test_the_storage_password_never_reaches_a_workers_command_line(tmp_path, postgres):
    secret = "hunter2-not-in-argv"
    url = postgres.replace("tune@", f"tune:{secret}@")  # trust auth: any password is accepted
    proc = subprocess.Popen(
        [sys.executable, "-m", "ember_np", "tune", "CartPole-v1", "--storage", url, "--study",
         "pw", "--trials", "2", "--workers", "2", "--dir", str(tmp_path / "t"), *TINY],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    seen: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < deadline and proc.poll() is None:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (stat.parent / "cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == proc.pid and b"ember_np.tune" in cmdline:  # a worker, past its exec
                seen[int(stat.parent.name)] = cmdline
        time.sleep(0.05)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert len(seen) == 2, "did not see both workers"
    for cmdline in seen.values():
        assert secret.encode() not in cmdline
    assert secret not in out.decode() + err.decode()
