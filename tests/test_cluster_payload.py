"""What the Dask client writes from a worker's returned seed (``cluster.write_seed``).

No cluster is needed: ``write_seed`` is called with the payload a worker's
``seed_task`` would return, or one a mismatched or buggy worker could.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ember_np.training import cluster
from ember_np.training.cluster import ClusterError, write_seed


def payload(seed: int = 0, **files: bytes) -> dict:
    """A finished seed as ``seed_task`` returns it (``files`` added to a plain run's)."""
    base = {
        "checkpoints/latest.npz": b"latest " * 100,
        "checkpoints/best.npz": b"best " * 100,
        "config.json": b'{"env_id": "CartPole-v1"}',
        "train_episodes.jsonl": b'{"total_reward": 1.0, "length": 1}\n',
    }
    return {"seed": seed, "attempt": "a1", "result": {"seed": seed, "run_dir": "/worker/seed"},
            "dirs": ["checkpoints"], "files": {**base, **files}}  # fmt: skip


def everything_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_finished_seed_is_written_whole_with_result_json_last(tmp_path):
    parent = tmp_path / "parent"
    parent.mkdir()
    sent = payload(3, **{".lock": b"4242"})
    target = write_seed(parent, sent, 3, "worker tcp://10.0.0.1:1234 (pid 7)")
    assert target == parent / "seed_3"
    for rel, data in sent["files"].items():
        if rel != ".lock":
            assert (target / rel).read_bytes() == data
    assert not (target / ".lock").exists()  # the worker's lock is not the client's
    result = json.loads((target / "result.json").read_text())
    assert result == {"seed": 3, "run_dir": str(target)}
    assert not [p for p in everything_under(target) if p.endswith(".tmp")]


@pytest.mark.parametrize("where", ["files", "dirs"])
def test_paths_outside_the_seed_directory_are_refused_and_nothing_is_written(tmp_path, where):
    parent = tmp_path / "runs" / "parent"
    parent.mkdir(parents=True)
    bad = ["../../escaped.txt", str(tmp_path / "abs" / "escaped.txt"), "checkpoints/../../x"]
    for rel in bad:
        sent = payload(0)
        if where == "files":
            sent["files"][rel] = b"x"
        else:
            sent["dirs"].append(rel)
        with pytest.raises(ClusterError, match=r"worker w1 returned the path .* outside seed_0/"):
            write_seed(parent, sent, 0, "worker w1")
    assert everything_under(tmp_path) == ["runs", "runs/parent"]


def test_a_payload_of_another_seed_is_refused_naming_the_worker(tmp_path):
    with pytest.raises(ClusterError) as caught:
        write_seed(tmp_path, payload(5), 2, "worker tcp://10.0.0.9:40000 (pid 31)")
    message = str(caught.value)
    assert "worker tcp://10.0.0.9:40000 (pid 31)" in message
    assert "seed 5" in message and "seed 2" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "broken",
    [None, [], {"seed": 0}, {**payload(0), "files": [b"x"]}, {**payload(0), "dirs": "checkpoints"}],
)
def test_a_payload_that_is_not_a_seeds_run_is_one_error_naming_the_worker(tmp_path, broken):
    with pytest.raises(ClusterError, match="^worker w2 returned .* for seed 0, not a seed's run"):
        write_seed(tmp_path, broken, 0, "worker w2")
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_became_a_link_is_not_written_through(tmp_path, monkeypatch):
    parent, outside = tmp_path / "parent", tmp_path / "outside"
    parent.mkdir()
    outside.mkdir()
    fsync = cluster.fsync_dir

    def swap_in_a_link(directory):  # another process links seed_0/checkpoints elsewhere
        fsync(directory)
        if Path(directory) == parent:
            (parent / "seed_0" / "checkpoints").symlink_to(outside)

    monkeypatch.setattr(cluster, "fsync_dir", swap_in_a_link)
    with pytest.raises(ClusterError, match="link or not a directory"):
        write_seed(parent, payload(0), 0)
    assert list(outside.iterdir()) == []
    assert not (parent / "seed_0" / "result.json").exists()


def test_every_file_is_fsynced_before_result_json(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def record(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    if not os.path.exists("/proc/self/fd"):
        pytest.skip("needs /proc to name the fsynced files")
    monkeypatch.setattr(os, "fsync", record)
    sent = payload(0)
    write_seed(tmp_path, sent, 0)
    # atomic_write fsyncs a temporary ".<name>.<random>.tmp" before renaming it
    files = [name for name in synced if name.endswith(".tmp")]
    written = [name.split(".")[1] for name in files]
    names = {Path(rel).name.split(".")[0] for rel in sent["files"]}
    assert set(written) - {"result"} == names
    assert written[-1] == "result"  # the seed counts as finished only once all else is safe
