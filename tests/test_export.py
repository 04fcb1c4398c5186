"""``ember-np export``: ONNX model of a policy, checked by onnx and run by onnxruntime."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ember_np import CheckpointError, DqnAgent, DqnConfig, DqnPolicy, IndexActionMapper, VecEncoder
from ember_np.cli import main
from ember_np.export import export_onnx

onnx = pytest.importorskip("onnx")


def session(path):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def metadata(path):
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def test_onnxruntime_matches_the_policy_within_1e_5(trained_run, tmp_path, capsys):
    out = tmp_path / "policy.onnx"
    assert main(["export", str(trained_run), "--checkpoint", "best", "-o", str(out)]) == 0
    assert f"wrote {out} (4 inputs -> 2 Q-values)" in capsys.readouterr().out
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node] == ["Gemm", "Relu", "Gemm", "Relu", "Gemm"]
    (inp,), (outp,) = model.graph.input, model.graph.output
    assert (inp.name, outp.name) == ("obs", "q_values")
    dims = [(d.dim_param, d.dim_value) for d in inp.type.tensor_type.shape.dim]
    assert dims == [("batch", 0), ("", 4)]

    sess = session(out)
    obs = np.random.default_rng(0).normal(0.0, 1.5, (1000, 4)).astype(np.float32)
    for backend in ("numpy", "numba"):
        policy = DqnPolicy.load(trained_run / "checkpoints" / "best.npz", backend=backend)
        expected = policy.q_values_batch(obs)
        for batch in (1, 64):  # 1000 = 15 * 64 + 40: the last batch is partial
            got = np.concatenate(
                [
                    sess.run(["q_values"], {"obs": obs[i : i + batch]})[0]
                    for i in range(0, 1000, batch)
                ]
            )
            assert got.shape == (1000, 2) and got.dtype == np.float32
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        offset = int(metadata(out)["action_offset"])
        assert (offset + got.argmax(axis=1)).tolist() == policy.act_batch(obs).tolist()


def test_metadata_records_shapes_and_action_offset(tmp_path):
    agent = DqnAgent(
        VecEncoder((2, 2)), IndexActionMapper(3, start=5), DqnConfig(hidden_sizes=(8,)), 1
    )
    ckpt = agent.save(tmp_path / "a.npz")
    meta = export_onnx(ckpt, tmp_path / "a.onnx")
    assert meta == metadata(tmp_path / "a.onnx")
    assert (meta["obs_size"], meta["obs_shape"], meta["n_actions"], meta["action_offset"]) == (
        "4", "[2, 2]", "3", "5",
    )  # fmt: skip
    assert meta["layer_sizes"] == "[4, 8, 3]" and meta["source"] == str(ckpt)
    assert '"type": "VecEncoder"' in meta["encoder"] and '"start": 5' in meta["action_mapper"]
    sess = session(tmp_path / "a.onnx")
    obs = np.random.default_rng(2).standard_normal((7, 2, 2)).astype(np.float32)
    q = sess.run(None, {"obs": obs.reshape(7, 4)})[0]
    np.testing.assert_allclose(q, agent.into_policy().q_values_batch(obs), rtol=1e-5, atol=1e-5)
    assert (5 + q.argmax(axis=1)).tolist() == agent.into_policy().act_batch(obs).tolist()


def test_checkpoint_choice(trained_run, tmp_path):
    step = tmp_path / "step.onnx"
    assert main(["export", str(trained_run), "--checkpoint", "step_300", "-o", str(step)]) == 0
    assert metadata(step)["source"].endswith("step_300.npz")
    latest = tmp_path / "latest.onnx"
    ckpt = trained_run / "checkpoints" / "latest.npz"
    assert main(["export", str(ckpt), "-o", str(latest)]) == 0  # a checkpoint file
    w_step, w_latest = (onnx.numpy_helper.to_array(onnx.load(str(p)).graph.initializer[0])
                        for p in (step, latest))  # fmt: skip
    assert not np.array_equal(w_step, w_latest)  # training moved the weights between the two


@pytest.mark.parametrize(
    "args, message",
    [
        (["--checkpoint", "step_7"], "no checkpoint"),
        (["--checkpoint", "worst"], "--checkpoint must be best, latest or step_N, got 'worst'"),
    ],
)
def test_bad_checkpoint_choice_exits_2(trained_run, tmp_path, capsys, args, message):
    out = tmp_path / "p.onnx"
    assert main(["export", str(trained_run), *args, "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def corrupted(src, dst):
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])


def foreign(src, dst):
    np.savez(dst, weights=np.ones((4, 2), np.float32))


def wrong_shapes(src, dst):
    with np.load(src) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["online/w1"] = arrays["online/w1"][:, :3]
    np.savez(dst, **arrays)


@pytest.mark.parametrize("damage", [corrupted, foreign, wrong_shapes])
def test_bad_checkpoint_is_a_checkpoint_error_and_leaves_no_file(
    trained_run, tmp_path, capsys, damage
):
    bad = tmp_path / "bad.npz"
    damage(trained_run / "checkpoints" / "best.npz", bad)
    out = tmp_path / "out" / "policy.onnx"
    out.parent.mkdir()
    with pytest.raises(CheckpointError, match="bad.npz"):
        export_onnx(bad, out)
    assert list(out.parent.iterdir()) == []
    # through the CLI: one line, exit 2, and an existing file is left as it was
    out.write_bytes(b"previous model")
    assert main(["export", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ember-np: error: ") and "bad.npz" in err and err.count("\n") == 1
    assert out.read_bytes() == b"previous model"
    assert list(out.parent.iterdir()) == [out]  # no temporary file left beside it


def test_without_onnx_the_command_prints_the_install_line(trained_run, tmp_path):
    out = tmp_path / "p.onnx"
    code = textwrap.dedent(
        f"""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "onnx":
                    raise ImportError("onnx is blocked in this test")

        sys.meta_path.insert(0, Block())
        from ember_np.cli import main
        sys.exit(main(["export", {str(trained_run)!r}, "-o", {str(out)!r}]))
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr == (
        'ember-np: error: ember-np export needs the onnx package: pip install "ember-np[onnx]"\n'
    )
    assert not out.exists()


def test_export_reads_checkpoints_without_the_run_directory(trained_run, tmp_path):
    # a checkpoint copied out of its run (as shipped to a service) exports the same model
    copy = tmp_path / "best.npz"
    shutil.copy(trained_run / "checkpoints" / "best.npz", copy)
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    export_onnx(copy, a)
    assert main(["export", str(trained_run), "-o", str(b)]) == 0  # --checkpoint best by default
    ga, gb = (onnx.load(str(p)).graph for p in (a, b))
    assert ga.SerializeToString() == gb.SerializeToString()


# -- the output is a new or regular file, never the input (issue 23, item 5) ---------------


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("ember-np: error: ") and err.count("\n") == 1, err
    return err


def test_exporting_onto_the_checkpoint_itself_is_refused_and_keeps_it(
    trained_run, tmp_path, capsys
):
    ckpt = tmp_path / "ckpts" / "best.npz"
    ckpt.parent.mkdir()
    shutil.copy(trained_run / "checkpoints" / "best.npz", ckpt)
    before = ckpt.read_bytes()
    link = tmp_path / "hard.npz"
    os.link(ckpt, link)
    for output in (ckpt, tmp_path / "ckpts" / ".." / "ckpts" / "best.npz", link):
        assert main(["export", str(ckpt), "-o", str(output)]) == 2
        line = one_error_line(capsys)
        assert f"output {output} is the checkpoint being exported ({ckpt})" in line
        assert ckpt.read_bytes() == before
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["best.npz"]  # no temporary left
    with pytest.raises(ValueError, match="is the checkpoint being exported"):
        export_onnx(link, ckpt)


def test_a_symlink_as_output_is_refused_and_left_as_it_is(trained_run, tmp_path, capsys):
    target = tmp_path / "elsewhere.onnx"
    target.write_bytes(b"not mine")
    out = tmp_path / "policy.onnx"
    out.symlink_to(target)
    assert main(["export", str(trained_run), "-o", str(out)]) == 2
    assert f"output {out} is a symbolic link" in one_error_line(capsys)
    assert out.is_symlink() and target.read_bytes() == b"not mine"


def char_device(tmp_path) -> Path:
    """A character device to write to: a twin of /dev/null in tmp_path where the user may
    make one (root), else /dev/null itself (which a user cannot replace anyway)."""
    twin = tmp_path / "null"
    try:
        os.mknod(twin, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        return Path("/dev/null")
    return twin


@pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and device nodes")
@pytest.mark.parametrize("kind", ["fifo", "char device", "directory"])
def test_a_path_that_is_not_a_regular_file_is_refused_and_keeps_its_type(
    trained_run, tmp_path, capsys, kind
):
    if kind == "fifo":
        out, what, is_kind = tmp_path / "pipe", "a FIFO", stat.S_ISFIFO
        os.mkfifo(out)
    elif kind == "char device":
        out, what, is_kind = char_device(tmp_path), "a character device", stat.S_ISCHR
    else:
        out, what, is_kind = tmp_path / "dir", "a directory", stat.S_ISDIR
        out.mkdir()
    assert main(["export", str(trained_run), "-o", str(out)]) == 2
    line = one_error_line(capsys)
    assert f"output {out} is {what}, not a regular file" in line
    assert is_kind(os.lstat(out).st_mode)


def test_an_existing_regular_file_is_replaced(trained_run, tmp_path, capsys):
    out = tmp_path / "policy.onnx"
    out.write_bytes(b"an older model")
    assert main(["export", str(trained_run), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.read_bytes() != b"an older model" and metadata(out)["n_actions"] == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.onnx"]
