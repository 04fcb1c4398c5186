"""Many seeds: each seed is exactly its single-seed run; a killed worker; report and plot."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import helpers
import numpy as np
import pytest
from helpers import SMALL_ARGS, still_running

from ember_np.cli import main
from ember_np.training.multiseed import load_multiseed, parse_seeds, train_seeds
from ember_np.training.spec import RunSpec

SMALL = SMALL_ARGS
TRAIN = ["train", "CartPole-v1", "--steps", "1500", "--eval-every", "500", "--eval-episodes",
         "2", "--checkpoint-freq", "500", *SMALL]  # fmt: skip


def only_dir(path: Path) -> Path:
    (found,) = [p for p in path.iterdir() if p.is_dir()]
    return found


def assert_same_run(a: Path, b: Path) -> None:
    """Same config, logs byte for byte, same checkpoint files with equal arrays."""
    assert json.loads((a / "config.json").read_text()) == json.loads(
        (b / "config.json").read_text()
    )
    for log in ("train_episodes.jsonl", "eval_episodes.jsonl"):
        assert (a / log).read_bytes() == (b / log).read_bytes(), log
    names = sorted(p.name for p in (a / "checkpoints").iterdir())
    assert names == sorted(p.name for p in (b / "checkpoints").iterdir())
    for name in names:
        with np.load(a / "checkpoints" / name) as x, np.load(b / "checkpoints" / name) as y:
            assert sorted(x.files) == sorted(y.files)
            for key in x.files:
                assert np.array_equal(x[key], y[key]), (name, key)
    ma, mb = (json.loads((d / "metadata.json").read_text()) for d in (a, b))
    for key in ("total_steps", "total_episodes", "best_eval_reward", "name", "version"):
        assert ma[key] == mb[key], key


def test_seeds_on_two_workers_are_exactly_the_single_seed_runs(tmp_path, capsys):
    # The RL Zoo preset: 256-wide layers, where a multi-threaded BLAS would sum
    # in another order than the workers' single thread.
    zoo = ["train", "CartPole-v1", "--preset", "zoo", "--steps", "2000", "--eval-every", "1000",
           "--eval-episodes", "2", "--checkpoint-freq", "1000", "--quiet"]  # fmt: skip
    assert main([*zoo, "--seeds", "3", "--workers", "2", "--root", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1: training on ember_np/CartPole-v1" in out
    assert "3 of 3 seeds finished" in out and "IQM [95% CI]" in out
    parent = only_dir(tmp_path / "m" / "CartPole-v1" / "zoo")
    result = load_multiseed(parent)
    assert [r.seed for r in result.runs] == [0, 1, 2] and result.failed == []
    for seed in range(3):
        assert main([*zoo, "--seed", str(seed), "--root", str(tmp_path / f"s{seed}")]) == 0
        single = only_dir(tmp_path / f"s{seed}" / "CartPole-v1" / "zoo")
        assert_same_run(parent / f"seed_{seed}", single)
        evals = [json.loads(line) for line in (single / "eval_episodes.jsonl").open()]
        final = [r["total_reward"] for r in evals[-2:]]  # the last evaluation, 2 episodes
        assert result.runs[seed].final_reward == pytest.approx(sum(final) / 2)


def test_python_api_trains_a_list_of_seeds(tmp_path):
    from ember_np.presets import get_preset

    config = get_preset("ember").config.replace(min_replay_size=200, hidden_sizes=(32,))
    run = RunSpec("ember_np/CartPole-v1", config=config, steps=600, eval_every=300,
                  eval_episodes=1)  # fmt: skip
    result = train_seeds(run, [4, 2], workers=1, root=tmp_path, progress=False)
    assert [r.seed for r in result.runs] == [2, 4] or [r.seed for r in result.runs] == [4, 2]
    assert sorted(r.run_dir.name for r in result.runs) == ["seed_2", "seed_4"]
    assert all([s for s, _, _ in r.curve] == [300, 600, 600] for r in result.runs)
    assert len(result.scores("final")) == 2 and "2 of 2 seeds finished" in result.summary()
    assert result.parent.parent == tmp_path / "ember_np-CartPole-v1" / "default"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seeds": []}, "at least one seed"),
        ({"seeds": [1, 1]}, "distinct non-negative"),
        ({"steps": 0}, "steps must be an integer >= 1, got 0"),
        ({"eval_every": 0}, "eval_every must be an integer >= 1, got 0"),
        ({"workers": 0}, "workers must be a positive integer"),
    ],
)
def test_train_seeds_rejects_bad_arguments(kwargs, message, tmp_path):
    settings = {"steps": 10, **{k: v for k, v in kwargs.items() if k in ("steps", "eval_every")}}
    args = {"seeds": [0], "root": tmp_path, "progress": False,
            **{k: v for k, v in kwargs.items() if k not in settings}}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        train_seeds(RunSpec("ember_np/CartPole-v1", **settings), **args)
    assert not list(tmp_path.iterdir())  # refused before any directory is made


@pytest.mark.parametrize(
    "text, seeds",
    [("3", [0, 1, 2]), ("5-7", [5, 6, 7]), ("1,4,7", [1, 4, 7]), ("0-1,9", [0, 1, 9])],
)
def test_parse_seeds(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["0", "x", "3-1", "1,1", "-2", "1,,2"])
def test_parse_seeds_rejects(text):
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds(text)


def test_bad_seed_options_are_one_line(tmp_path, capsys):
    assert main(["train", "CartPole-v1", "--seeds", "3-1"]) == 2
    assert "a range must go up" in capsys.readouterr().err
    assert main(["train", "CartPole-v1", "--seeds", "3", "--seed", "1"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "is not a multi-seed run" in capsys.readouterr().err


def worker_pids(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = []
    for child in children:
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
        except FileNotFoundError:
            pass
    return found


def start_two_workers(args: list[str], seeds: int, root: Path) -> subprocess.Popen:
    """``ember-np ARGS --seeds SEEDS --workers 2 --root ROOT`` in a subprocess, returned
    once both workers are training (two seeds under way, neither finished)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ember_np", *args, "--seeds", str(seeds), "--workers", "2",
         "--root", str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 120
    while True:
        still_running(proc, deadline, "both workers training")
        busy = [d for d in root.glob("*/*/*/seed_*")
                if (d / "train_episodes.jsonl").is_file()
                and (d / "train_episodes.jsonl").stat().st_size > 0
                and not (d / "result.json").exists()]  # fmt: skip
        if len(busy) == 2:
            return proc
        time.sleep(0.02)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkilled_worker_leaves_other_seeds_and_resume_finishes(tmp_path):
    args = ["train", "CartPole-v1", "--preset", "ember", "--steps", "30000", "--eval-every",
            "10000", "--eval-episodes", "2", "--checkpoint-freq", "5000", "--quiet"]  # fmt: skip
    proc = start_two_workers(args, 3, tmp_path / "m")
    os.kill(worker_pids(proc.pid)[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "killed by SIGKILL" in err and "seeds that did not finish" in out
    parent = only_dir(tmp_path / "m" / "CartPole-v1" / "ember")
    before = load_multiseed(parent)
    assert len(before.failed) == 1 and len(before.runs) == 2
    (lost,) = before.failed
    finished = {r.seed: {p: p.read_bytes() for p in r.run_dir.rglob("*") if p.is_file()}
                for r in before.runs}  # fmt: skip
    assert main(["resume", str(parent), "--workers", "1", "--quiet"]) == 0
    after = load_multiseed(parent)
    assert sorted(r.seed for r in after.runs) == [0, 1, 2] and after.failed == []
    for seed, files in finished.items():  # the seeds that finished are untouched
        assert {p: p.read_bytes() for p in (parent / f"seed_{seed}").rglob("*")
                if p.is_file()} == files  # fmt: skip
    assert (parent / f"seed_{lost}.interrupted").is_dir()  # the partial attempt is kept
    # The seed trained again is exactly the run --seed makes.
    assert main([*args, "--seed", str(lost), "--root", str(tmp_path / "single")]) == 0
    assert_same_run(
        parent / f"seed_{lost}", only_dir(tmp_path / "single" / "CartPole-v1" / "ember")
    )


def running(pid: int) -> bool:
    """Whether process ``pid`` is alive (a zombie nobody reaped yet has exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkilled_parent_workers_stop_quietly_and_resume_finishes(tmp_path):
    args = ["train", "CartPole-v1", "--preset", "ember", "--steps", "20000", "--eval-every",
            "10000", "--eval-episodes", "2", "--quiet"]  # fmt: skip
    proc = start_two_workers(args, 2, tmp_path / "m")
    workers = worker_pids(proc.pid)
    assert len(workers) == 2
    os.kill(proc.pid, signal.SIGKILL)
    # The orphaned workers hold the pipes open until they exit: at their next
    # progress message, without a traceback.
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert not any(running(pid) for pid in workers)
    parent = only_dir(tmp_path / "m" / "CartPole-v1" / "ember")
    assert load_multiseed(parent).runs == []
    assert main(["resume", str(parent), "--workers", "1", "--quiet"]) == 0
    assert sorted(r.seed for r in load_multiseed(parent).runs) == [0, 1]


def test_report_and_plot_of_multiseed_runs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    root = str(tmp_path)
    assert main([*TRAIN, "--seeds", "4", "--workers", "1", "--root", root, "--version", "a"]) == 0
    assert main([*TRAIN, "--seeds", "2", "--workers", "1", "--root", root, "--version", "b",
                 "--set", "learning_rate=0.01"]) == 0  # fmt: skip
    capsys.readouterr()
    a = only_dir(tmp_path / "CartPole-v1" / "a")
    b = only_dir(tmp_path / "CartPole-v1" / "b")
    assert main(["report", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "[1] ember_np/CartPole-v1: 4 of 4 seeds finished" in out
    assert "[2] ember_np/CartPole-v1: 2 of 2 seeds finished" in out
    assert "[1] over [2]: final" in out
    from ember_np.stats import probability_of_improvement

    p, _ = probability_of_improvement(load_multiseed(a).scores(), load_multiseed(b).scores())
    assert f"final {p:.2f}" in out
    png = tmp_path / "seeds.png"
    assert main(["plot", str(a), str(b), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- seed specs are bounded and printed compactly (issue 23, item 11) ------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ("0-999999999999", "names 1,000,000,000,000 seeds, more than the 10,000"),
        ("10000000", "names 10,000,000 seeds, more than the 10,000"),
        ("0-9999,20000-20000", "names 10,001 seeds, more than the 10,000"),
        ("1,9223372036854775808", "above the largest seed 9223372036854775807"),
        ("1," + "9" * 5000, "seed of more than 30 digits is above the largest seed"),
        ("9" * 5000, "names more than 10**30 seeds, more than the 10,000"),
        ("5-99999999999999999999999", "above the largest seed 9223372036854775807"),
        ("1,²", "expects a count"),
    ],
)
def test_seed_specs_are_bounded_before_the_list_is_built(text, message):
    with pytest.raises(ValueError, match="--seeds") as info:
        parse_seeds(text)
    assert message in str(info.value)


def test_the_largest_seed_and_count_are_accepted():
    from ember_np.training.multiseed import MAX_SEED, MAX_SEEDS

    assert parse_seeds(str(MAX_SEEDS)) == list(range(MAX_SEEDS))
    assert parse_seeds(f"{MAX_SEED - 1}-{MAX_SEED}") == [MAX_SEED - 1, MAX_SEED]


def test_train_seeds_refuses_too_many_seeds_before_making_a_directory(tmp_path):
    with pytest.raises(ValueError, match="at most 10,000 seeds"):
        train_seeds(RunSpec("ember_np/CartPole-v1", steps=10), range(10_001), root=tmp_path)
    with pytest.raises(ValueError, match="at most 9223372036854775807"):
        train_seeds(RunSpec("ember_np/CartPole-v1", steps=10), [2**63], root=tmp_path)
    assert not list(tmp_path.iterdir())


def test_too_many_seeds_at_the_command_line_is_one_line_and_makes_nothing(tmp_path, capsys):
    assert main(["train", "CartPole-v1", "--seeds", "10000000", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than the 10,000" in err and len(err) < 300
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["train", "tune"])
def test_too_many_workers_is_one_line_and_makes_nothing(tmp_path, capsys, command):
    from ember_np.training.multiseed import WORKERS_PER_CORE, default_workers

    limit = WORKERS_PER_CORE * default_workers()
    args = (
        ["train", "CartPole-v1", "--seeds", "3", "--root", str(tmp_path / "runs")]
        if command == "train"
        else ["tune", "CartPole-v1", "--dir", str(tmp_path / "t")]
    )
    assert main([*args, "--workers", str(limit + 1)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"at most {limit}" in err and f"got {limit + 1}" in err
    assert not list(tmp_path.iterdir())


def test_train_seeds_refuses_too_many_workers_before_making_a_directory(tmp_path):
    from ember_np.training.multiseed import WORKERS_PER_CORE, default_workers

    with pytest.raises(ValueError, match="workers must be at most"):
        train_seeds(RunSpec("CartPole-v1", steps=10), [0],
                    workers=WORKERS_PER_CORE * default_workers() + 1, root=tmp_path)  # fmt: skip
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "seeds, shown",
    [
        (range(20), "0-19"),
        ([1, 4, 7], "1,4,7"),
        ([0, 1, 2, 5, 9, 10, 11], "0-2,5,9-11"),
        ([3, 4], "3-4"),
        (range(0, 2000, 2), "0,2,4,6,8,10,...,1994,1996,1998 (1,000 seeds)"),
    ],
)
def test_seed_lists_are_printed_compactly(seeds, shown):
    from ember_np.training.multiseed import format_seeds

    assert format_seeds(seeds) == shown
    if "..." not in shown:  # what is printed can be given back to --seeds
        assert parse_seeds(shown) == sorted(seeds)


# -- one writer per multi-seed parent (issue 23, item 4) -------------------------------


def start_seeds(args: list[str], root: Path) -> tuple[subprocess.Popen, Path]:
    """``ember-np ARGS --root ROOT`` in a subprocess, returned with its parent directory
    once a seed is training (its first episode logged, no result.json yet)."""
    proc = subprocess.Popen([sys.executable, "-m", "ember_np", *args, "--root", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=helpers.interruptible)  # fmt: skip
    deadline = time.time() + 120
    while True:
        still_running(proc, deadline, "a seed training")
        for log in root.glob("*/*/*/seed_*/train_episodes.jsonl"):
            if log.stat().st_size > 0 and not (log.parent / "result.json").exists():
                return proc, log.parent.parent
        time.sleep(0.02)


def test_resume_of_a_parent_still_training_is_refused_naming_its_pid(tmp_path):
    proc, parent = start_seeds([*TRAIN, "--seeds", "2", "--workers", "1"], tmp_path / "m")
    os.kill(proc.pid, signal.SIGSTOP)  # it holds its lock meanwhile, whatever the timing
    try:
        second = subprocess.run([sys.executable, "-m", "ember_np", "resume", str(parent),
                                 "--quiet"], capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=300)
    assert second.returncode == 2, (second.stdout, second.stderr)
    (line,) = second.stderr.splitlines()
    assert f"multi-seed run {parent} is in use: process {proc.pid} is training in it" in line
    assert second.stdout == ""  # refused before printing or moving anything
    # The first run is untouched: it finishes every seed.
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "2 of 2 seeds finished" in out
    result = load_multiseed(parent)
    assert sorted(r.seed for r in result.runs) == [0, 1] and result.failed == []
    assert sorted(p.name for p in parent.iterdir()) == [".lock", "seed_0", "seed_1", "seeds.json"]


def test_train_seeds_holds_the_parent_lock_while_it_trains(tmp_path):
    from ember_np.presets import get_preset
    from ember_np.training.multiseed import parent_lock
    from ember_np.training.run import LOCK_FILE

    seen = []

    def on_start(parent: Path) -> None:  # another process's view of the lock, mid-run
        probe = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
                 "try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                 "except BlockingIOError: print(open(sys.argv[1]).read().strip())")  # fmt: skip
        seen.append(subprocess.run([sys.executable, "-c", probe, str(parent / LOCK_FILE)],
                                   capture_output=True, text=True).stdout.strip())  # fmt: skip

    config = get_preset("ember").config.replace(min_replay_size=64, hidden_sizes=(8,))
    run = RunSpec("ember_np/CartPole-v1", config=config, steps=100, eval_every=100,
                  eval_episodes=1)  # fmt: skip
    result = train_seeds(run, [0], workers=1, root=tmp_path, progress=False, on_start=on_start)
    assert seen == [str(os.getpid())]  # held, and naming this process
    with parent_lock(result.parent) as lock:  # released when train_seeds returned
        assert lock.held


# -- Ctrl-C says what finished and how to go on (issue 23, item 16) ----------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_names_the_finished_seeds_the_parent_and_how_to_resume(tmp_path):
    from ember_np.training.multiseed import format_seeds

    args = [*TRAIN, "--steps", "5000", "--seeds", "3", "--workers", "1"]
    proc, parent = start_seeds(args, tmp_path / "m")
    deadline = time.time() + 120
    while not (parent / "seed_0" / "result.json").exists():  # one seed done, one under way
        still_running(proc, deadline, "seed 0's result")
        time.sleep(0.02)
    workers = worker_pids(proc.pid)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert not any(running(pid) for pid in workers)  # no orphans
    state = load_multiseed(parent)  # what the message must say: the files on disk
    finished = sorted(r.seed for r in state.runs)
    assert 0 in finished and state.failed
    (line,) = [x for x in err.splitlines() if x.startswith("interrupted")]
    assert line == (
        f"interrupted: {len(finished)} of 3 seeds finished "
        f"({format_seeds(finished)}), {format_seeds(state.failed)} did not; "
        f"runs: {parent}/seed_<s>/; `ember-np resume {parent}` trains the unfinished seeds"
    )


@pytest.fixture(scope="module")
def small_parent(tmp_path_factory) -> Path:
    """A finished multi-seed run: 2 seeds of 1,500 steps, evaluated at 500, 1000, 1500."""
    root = tmp_path_factory.mktemp("seeds")
    assert main([*TRAIN, "--seeds", "2", "--workers", "1", "--root", str(root)]) == 0
    return only_dir(root / "CartPole-v1" / "ember")


# -- plot -o: the same output handling for single- and multi-seed runs (issue 23, item 14) --


def test_multiseed_plot_to_an_unknown_format_is_one_line_listing_the_formats(
    small_parent, tmp_path, capsys
):
    pytest.importorskip("matplotlib")
    out = tmp_path / "x.xyz"
    assert main(["plot", str(small_parent), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"-o {out}: unknown image format '.xyz'" in err
    assert ".png" in err and ".svg" in err and not out.exists()


def test_multiseed_plot_without_a_suffix_names_the_file_it_wrote(small_parent, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["plot", str(small_parent), "-o", str(tmp_path / "x")]) == 0
    assert f"wrote {tmp_path / 'x.png'}\n" in capsys.readouterr().out
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("multi", [False, True], ids=["single-run", "multi-seed"])
def test_plot_refuses_a_symlink_or_fifo_as_output_and_leaves_it(small_parent, tmp_path, capsys,
                                                                multi):  # fmt: skip
    pytest.importorskip("matplotlib")
    source = small_parent if multi else small_parent / "seed_0"
    target = tmp_path / "elsewhere.png"
    target.write_bytes(b"not mine")
    link = tmp_path / "link.png"
    link.symlink_to(target)
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    for out, what in ((link, "is a symbolic link"), (fifo, "is a FIFO, not a regular file")):
        assert main(["plot", str(source), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"output {out} {what}" in err
    assert link.is_symlink() and target.read_bytes() == b"not mine"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# -- a tampered result.json or seeds.json is one line naming it (issue 23, item 10) --------


def set_key(data: dict, key: str, value) -> dict:
    return {**data, key: value}


def drop_key(data: dict, key: str) -> dict:
    return {k: v for k, v in data.items() if k != key}


TAMPERED = [
    (
        lambda d: set_key(d, "final_reward", float("nan")),
        "'final_reward' must be a finite number, found nan",
    ),
    (
        lambda d: set_key(d, "best_eval_reward", "high"),
        "'best_eval_reward' must be a finite number, found 'high'",
    ),
    (
        lambda d: set_key(d, "curve", [[7, 1.0, 0.1]]),
        "'curve' must end at the run's last step 1500",
    ),
    (
        lambda d: set_key(d, "curve", [[s + 1, r, t] for s, r, t in d["curve"]]),
        "'curve' steps must be integers in 1..1500",
    ),
    (
        lambda d: set_key(d, "curve", 5),
        "'curve' must be a non-empty list of [step, reward, seconds]",
    ),
    (
        lambda d: set_key(d, "curve", [[500, 9.5]]),
        "'curve' must be a non-empty list of [step, reward, seconds]",
    ),
    (
        lambda d: set_key(d, "curve", []),
        "'curve' must be a non-empty list of [step, reward, seconds]",
    ),
    (lambda d: drop_key(d, "final_reward"), "lacks 'final_reward'"),
    (lambda d: set_key(d, "seed", 0), "'seed' is 0, but the file is seed 1's"),
    (lambda d: set_key(d, "seed", "1"), "'seed' is '1', but the file is seed 1's"),
    (lambda d: set_key(d, "train_seconds", -1), "'train_seconds' must be a finite number >= 0"),
    (lambda d: [d], "holds a JSON list, expected an object"),
]


@pytest.mark.parametrize("tamper, message", TAMPERED, ids=[m for _, m in TAMPERED])
def test_a_tampered_result_json_is_one_line_naming_it(small_parent, tmp_path, capsys, tamper,
                                                      message):  # fmt: skip
    pytest.importorskip("matplotlib")
    parent = tmp_path / "p"
    shutil.copytree(small_parent, parent)
    path = parent / "seed_1" / "result.json"
    path.write_text(json.dumps(tamper(json.loads(path.read_text()))))
    for argv in (["report", str(parent)], ["plot", str(parent), "-o", str(tmp_path / "x.png")],
                 ["resume", str(parent), "--quiet"]):  # fmt: skip
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        (line,) = captured.err.splitlines()
        assert line.startswith(f"ember-np: error: {path}: ") and message in line, argv
        assert "delete it to train seed 1 again" in line
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(ValueError, match="result.json"):
        load_multiseed(parent)


def test_a_result_json_that_is_not_json_is_named(small_parent, tmp_path, capsys):
    parent = tmp_path / "p"
    shutil.copytree(small_parent, parent)
    (parent / "seed_0" / "result.json").write_bytes(b'{"seed": 0, "fin')
    assert main(["report", str(parent)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{parent / 'seed_0' / 'result.json'}: not valid JSON" in line


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("steps", "x", "'steps' must be an integer >= 1, found 'x'"),
        ("keep", -1, "'keep' must be an integer >= 0, found -1"),
        ("env_id", 3, "'env_id' must be a string, found 3"),
        ("seeds", [0, 0], "'seeds' must be distinct integers in 0..9223372036854775807"),
        ("seeds", "0-1", "'seeds' must be distinct integers in 0..9223372036854775807"),
    ],
)
def test_a_tampered_seeds_json_is_one_line_naming_it(small_parent, tmp_path, capsys, key, value,
                                                     message):  # fmt: skip
    parent = tmp_path / "p"
    shutil.copytree(small_parent, parent)
    path = parent / "seeds.json"
    data = json.loads(path.read_text())
    if key == "seeds":
        data["seeds"] = value
    else:
        data["spec"][key] = value
    path.write_text(json.dumps(data))
    assert main(["report", str(parent)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{path} is not a valid multi-seed description" in line and message in line


def test_curve_matrix_refuses_curves_with_no_common_step(small_parent):
    from ember_np.report import curve_matrix

    result = load_multiseed(small_parent)
    result.runs[1] = type(result.runs[1])(1, result.runs[1].run_dir, 1.0, 1.0, [(7, 1.0, 0.1)])
    with pytest.raises(ValueError, match="share no evaluation step"):
        curve_matrix(result)
