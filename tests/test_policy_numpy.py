"""DqnPolicy with NumPy alone: no heavy imports, same actions and Q-values as compiled code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import naive
import numpy as np
import pytest

import ember_np
from ember_np import DqnPolicy, IndexActionMapper, VecEncoder
from ember_np.dqn.heads.forward import CompiledForward, NumpyForward, greedy_index, greedy_indices
from ember_np.nn import mlp

HEAVY = ("numba", "llvmlite", "gymnasium", "tqdm")

# A sys.meta_path finder, installed before anything else is imported, that
# makes importing any of HEAVY raise ImportError.
BLOCK_HEAVY = textwrap.dedent(
    f"""
    import sys
    HEAVY = {HEAVY!r}

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HEAVY:
                raise ImportError(f"{{name}} is blocked in this test")
            return None

    sys.meta_path.insert(0, Block())
    """
)


def run_blocked(code: str, site: bool = True) -> dict:
    """Run ``code`` in a fresh interpreter where HEAVY cannot be imported; its last line is JSON.

    With ``site=False`` the interpreter runs ``-S``, as a minimal install would
    start: no ``.pth`` hooks (this venv's editable install imports ``pathlib``,
    ``zipfile``, ... at start-up); ``sys.path`` gets only NumPy's and ember_np's
    directories.
    """
    flags, prefix = [], ""
    if not site:
        roots = [os.path.dirname(os.path.dirname(m.__file__)) for m in (np, ember_np)]
        flags, prefix = ["-S"], f"import sys\nsys.path[:0] = {roots!r}\n"
    out = subprocess.run(
        [sys.executable, *flags, "-c", prefix + BLOCK_HEAVY + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_policy(sizes, seed, backend, scale=1.0, start=0):
    rng = np.random.default_rng(seed)
    n = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    params = (rng.standard_normal(n) * scale).astype(np.float32)
    return DqnPolicy(
        sizes, params, VecEncoder(sizes[0]), IndexActionMapper(sizes[-1], start), backend
    )


def naive_q(policy, x):
    """float64 reference forward of the policy's weights (tests/naive.py)."""
    weights, biases = naive.unflatten(policy.params.astype(np.float64), policy.layer_sizes)
    return naive.forward(weights, biases, x.astype(np.float64))


def test_numpy_only_path_with_numba_llvmlite_gymnasium_and_tqdm_blocked(trained_run):
    path = trained_run / "checkpoints" / "best.npz"
    obs = np.random.default_rng(0).uniform(-2, 2, (64, 4)).astype(np.float32)
    result = run_blocked(
        f"""
        import json
        import numpy as np
        import ember_np
        from ember_np.policy import DqnPolicy, CheckpointError

        policy = DqnPolicy.load({str(path)!r})
        obs = np.array({obs.tolist()!r}, dtype=np.float32)
        try:
            DqnPolicy.load({str(path)!r}, backend="numba")
            numba_error = None
        except ImportError as exc:
            numba_error = str(exc)
        try:
            policy.act([float("nan"), 0.0, 0.0, 0.0])
            nan_error = None
        except ValueError as exc:
            nan_error = str(exc)
        print(json.dumps({{
            "backend": policy.backend,
            "same_class": ember_np.DqnPolicy is DqnPolicy,
            "act": [int(policy.act(o)) for o in obs],
            "act_list": int(policy.act(obs[0].tolist())),
            "act_batch": policy.act_batch(obs).tolist(),
            "q": [policy.q_values(o).tolist() for o in obs],
            "q_batch": policy.q_values_batch(obs).tolist(),
            "numba_error": numba_error,
            "nan_error": nan_error,
            "heavy_loaded": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY),
        }}))
        """
    )
    assert result["heavy_loaded"] == []
    assert result["backend"] == "numpy" and result["same_class"]
    assert "pip install numba" in result["numba_error"]
    assert "must be finite" in result["nan_error"]

    compiled = DqnPolicy.load(path, backend="numba")
    expected = [int(compiled.act(o)) for o in obs]
    assert result["act"] == expected == result["act_batch"]
    assert result["act_list"] == expected[0]
    q = compiled.q_values_batch(obs)
    np.testing.assert_allclose(np.array(result["q"], np.float32), q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(result["q_batch"], np.float32), q, rtol=1e-5, atol=1e-5)
    # a trained policy is not a constant one: the checks above compare real decisions
    assert len(set(expected)) == 2


#: Standard-library modules the deployed path no longer imports: zipfile's imports
#: (bz2, lzma, shutil, threading, importlib.util), pathlib's (urllib.parse,
#: ipaddress), importlib.abc's and dataclasses' (inspect), the cp437 codec. Together
#: tens of milliseconds of a fresh process's first action (issue 16's 0.2 s bar).
NOT_ON_THE_DEPLOYED_PATH = (
    "zipfile", "shutil", "bz2", "lzma", "threading", "pathlib", "urllib", "ipaddress",
    "importlib.util", "importlib.abc", "importlib.resources", "dataclasses", "tempfile",
    "encodings.cp437",
)  # fmt: skip


def test_the_deployed_path_imports_nothing_numpy_does_not_already(trained_run):
    """The recipe (import, load, act) adds none of NOT_ON_THE_DEPLOYED_PATH to what
    ``import numpy`` loaded (a NumPy that imports one itself cannot fail the test)."""
    path = trained_run / "checkpoints" / "best.npz"
    result = run_blocked(
        f"""
        import numpy as np
        watched = {NOT_ON_THE_DEPLOYED_PATH!r}
        checked = [m for m in watched if m not in sys.modules]
        from ember_np.policy import DqnPolicy
        action = DqnPolicy.load({str(path)!r}).act(np.zeros(4, dtype=np.float32))
        added = [m for m in checked if m in sys.modules]
        import json
        print(json.dumps({{"checked": checked, "added": added, "action": int(action)}}))
        """,
        site=False,
    )
    assert result["added"] == []
    assert result["action"] in (0, 1)
    assert len(result["checked"]) >= len(NOT_ON_THE_DEPLOYED_PATH) - 3  # not vacuous


def test_import_ember_np_is_light_and_native_env_ids_still_work():
    result = run_blocked(
        """
        import json
        import ember_np
        light = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
        names = sorted(set(ember_np.__all__) - set(dir(ember_np)))
        print(json.dumps({"light": light, "missing_from_dir": names}))
        """
    )
    assert result == {"light": [], "missing_from_dir": []}
    # without the block: gymnasium imported after ember_np, and before it
    for first, second in (("ember_np", "gymnasium"), ("gymnasium", "ember_np")):
        code = (
            f"import {first}, {second}, numpy as np\n"
            "env = gymnasium.make('ember_np/CartPole-v1')\n"
            "obs, _ = env.reset(seed=0)\n"
            "print(type(env.unwrapped).__module__, 'numba' in sys.modules)\n"
            # the hook is gone and gymnasium keeps its own loader
            "print(any(type(f).__module__ == 'ember_np._registration' for f in sys.meta_path))\n"
            "print(type(gymnasium.__spec__.loader).__name__)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", "import sys\n" + code], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["ember_np.envs.native", "True", "False", "SourceFileLoader"]


def test_every_public_name_resolves_lazily():
    for name in ember_np.__all__:
        assert getattr(ember_np, name) is not None, name
    from ember_np import CircularBuffer, DqnAgent  # noqa: F401  (from-imports go through it too)
    from ember_np.dqn.policy import DqnPolicy as Deep
    from ember_np.policy import DqnPolicy as Short

    assert Deep is Short is ember_np.DqnPolicy
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        ember_np.NoSuchThing  # noqa: B018


def test_registration_table_names_every_native_env():
    from ember_np._registration import NATIVE_ENV_ENTRY_POINTS
    from ember_np.envs.native import NATIVE_ENVS

    assert NATIVE_ENV_ENTRY_POINTS == {
        env_id: f"{cls.__module__}:{cls.__name__}" for env_id, cls in NATIVE_ENVS.items()
    }


@pytest.mark.parametrize(
    "sizes",
    [(4, 64, 64, 2), (3, 2), (6, 32, 3), (8, 16, 16, 16, 5), (2, 1, 1), (10, 256, 256, 4)],
)
def test_numpy_and_compiled_paths_agree(sizes):
    fast = make_policy(sizes, seed=sum(sizes), backend="numba", scale=0.5, start=3)
    plain = make_policy(sizes, seed=sum(sizes), backend="numpy", scale=0.5, start=3)
    assert (fast.backend, plain.backend) == ("numba", "numpy")
    x = np.random.default_rng(1).standard_normal((300, sizes[0])).astype(np.float32)
    q_fast, q_plain = fast.q_values_batch(x), plain.q_values_batch(x)
    assert q_plain.dtype == np.float32 and q_plain.shape == (300, sizes[-1])
    # float32 rounding: both within a few ulps of the float64 reference and of each other
    ref = naive_q(plain, x)
    tol = 1e-5 * max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(q_plain, ref, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(q_plain, q_fast, rtol=1e-5, atol=tol)
    for i in range(0, 300, 7):
        np.testing.assert_allclose(plain.q_values(x[i]), fast.q_values(x[i]), rtol=1e-5, atol=tol)
    actions = [fast.act(o) for o in x]
    assert [plain.act(o) for o in x] == actions
    assert plain.act_batch(x).tolist() == fast.act_batch(x).tolist() == actions
    assert set(actions) <= set(range(3, 3 + sizes[-1]))
    assert plain.act_batch(x[:0]).shape == (0,) == fast.act_batch(x[:0]).shape


def test_ties_go_to_the_lowest_action_on_both_paths():
    # Output layer weights 0: every Q-value is its bias, so ties are exact.
    for bias, expected in (([1.0, 1.0, 1.0], 0), ([0.0, 5.0, 5.0], 1), ([2.0, 1.0, 2.0], 0)):
        sizes = (3, 8, 3)
        results = []
        for backend in ("numpy", "numba"):
            policy = make_policy(sizes, seed=0, backend=backend)
            params = policy.params.copy()
            params[3 * 8 + 8 : 3 * 8 + 8 + 8 * 3] = 0.0  # W of the output layer
            params[-3:] = bias
            policy = DqnPolicy(sizes, params, policy.encoder, policy.action_mapper, backend)
            x = np.random.default_rng(2).standard_normal((20, 3)).astype(np.float32)
            results.append(([policy.act(o) for o in x], policy.act_batch(x).tolist()))
        assert results[0] == results[1] == ([expected] * 20, [expected] * 20)


def test_greedy_index_follows_the_kernel_argmax_rule():
    nan, inf = np.nan, np.inf
    cases = [
        [1.0, 1.0], [0.0, 2.0, 2.0], [nan, 5.0, 1.0], [1.0, nan, 3.0], [nan, nan],
        [-inf, nan, -inf], [-inf, -inf, 1.0], [inf, inf], [3.0, nan, 3.0, 4.0], [-0.0, 0.0],
    ]  # fmt: skip
    rng = np.random.default_rng(3)
    for _ in range(300):  # random rows with few distinct values: many ties, some NaN
        row = rng.choice([0.0, 1.0, 2.0, nan, -inf], size=rng.integers(1, 6)).tolist()
        cases.append(row)
    for row in cases:
        q = np.array(row, dtype=np.float32)
        assert greedy_index(q) == mlp.argmax(q), row
    for n in (1, 2, 5):
        q = np.array([r + [0.0] * (n - len(r)) for r in cases if len(r) <= n], dtype=np.float32)
        assert greedy_indices(q).tolist() == [mlp.argmax(r) for r in q]


# NumPy warns about the inf * 0 of the NumPy path's finiteness unit before act raises.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("sizes", [(4, 16, 2), (4, 2)])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_non_finite_observation_is_refused_by_act(sizes, backend):
    policy = make_policy(sizes, seed=4, backend=backend)
    for bad in ([np.nan, 0, 0, 0], [0, np.inf, 0, 0], [0, 0, -np.inf, 0]):
        with pytest.raises(ValueError, match="observation must be finite"):
            policy.act(bad)
    # +inf whose first-layer products are all -inf: ReLU would hide it without a check
    params = policy.params.copy()
    params[sizes[1] * 0 : sizes[1]] = -1.0  # row 0 of W_0: every unit gets -inf from x[0]
    hidden = DqnPolicy(sizes, params, policy.encoder, policy.action_mapper, backend)
    with pytest.raises(ValueError, match="observation must be finite"):
        hidden.act([np.inf, 0, 0, 0])


def test_backend_choice():
    assert make_policy((4, 8, 2), 0, "auto").backend == "numba"  # numba is loaded in this process
    assert make_policy((4, 8, 2), 0, "numpy").backend == "numpy"
    with pytest.raises(ValueError, match=r"backend must be one of \('auto', 'numpy', 'numba'\)"):
        make_policy((4, 8, 2), 0, "torch")
    assert "backend='numpy'" in repr(make_policy((4, 8, 2), 0, "numpy"))


def test_load_refuses_a_bad_backend_name_before_reading(tmp_path):
    missing = tmp_path / "missing.npz"
    with pytest.raises(ValueError, match="backend must be one of") as info:
        DqnPolicy.load(missing, backend="gpu")
    assert not isinstance(info.value, ember_np.CheckpointError)


def test_layers_are_copies_in_the_checkpoint_layout():
    policy = make_policy((5, 7, 3), seed=5, backend="numpy")
    weights, biases = naive.unflatten(policy.params, policy.layer_sizes)
    layers = policy.layers()
    assert [w.shape for w, _ in layers] == [(5, 7), (7, 3)]
    for (w, b), w_ref, b_ref in zip(layers, weights, biases):
        assert np.array_equal(w, w_ref) and np.array_equal(b, b_ref)
    layers[0][0][:] = 0.0  # a copy: the policy is unchanged
    assert np.array_equal(policy.layers()[0][0], weights[0])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_pickled_policy_acts_the_same(backend):
    import pickle

    policy = make_policy((4, 16, 3), seed=6, backend=backend)
    copy = pickle.loads(pickle.dumps(policy))
    x = np.random.default_rng(7).standard_normal((50, 4)).astype(np.float32)
    assert copy.backend == backend
    assert copy.act_batch(x).tolist() == policy.act_batch(x).tolist()
    assert [copy.act(o) for o in x] == [policy.act(o) for o in x]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_act_fast_path_and_general_path_agree(backend):
    """``act`` takes a C-contiguous float32 vector as it is (the compiled path through its
    bound kernel entry point) and everything else through the encoder: same actions, same
    NaN rule, and no second compiled version for the odd layouts."""
    import pickle

    policy = make_policy((4, 32, 32, 3), seed=8, backend=backend, start=1)
    x = np.random.default_rng(9).standard_normal((100, 4)).astype(np.float32)
    fast = [policy.act(o) for o in x]  # contiguous rows: the fast path
    wide = np.zeros((100, 8), dtype=np.float32)
    wide[:, ::2] = x
    readonly = x.copy()
    readonly.flags.writeable = False
    odd = (
        [o.tolist() for o in x],  # lists
        list(x.astype(np.float64)),  # another dtype
        list(wide[:, ::2]),  # strided float32 views of the right shape
        list(readonly),  # read-only rows
        list(x.astype(">f4")),  # big-endian
    )  # fmt: skip
    for rows in odd:
        assert [policy.act(o) for o in rows] == fast
    assert policy.act_batch(x).tolist() == fast
    bad = x[0].copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="observation must be finite"):
        policy.act(bad)  # a contiguous float32 vector: the fast path checks it too
    # The forward pass alone pickles after its entry point was bound (as in act's fast path).
    forward = (CompiledForward if backend == "numba" else NumpyForward)(
        policy.layer_sizes, policy.params
    )
    assert [forward.greedy_one(o) + 1 for o in x] == fast
    again = pickle.loads(pickle.dumps(forward))
    assert [again.greedy_one(o) + 1 for o in x] == fast
