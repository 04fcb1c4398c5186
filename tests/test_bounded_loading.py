"""Bounded checkpoint loading: hostile archives are refused before anything is decompressed.

A small file can declare huge arrays (in its ``.npy`` headers or in the zip's
central directory), inflate a thousandfold (a zip bomb), disagree with itself
about sizes, or list more members than any checkpoint has. Every loader must
refuse all of these with ``CheckpointError`` while allocating almost nothing:
the peak is measured with ``tracemalloc``, which sees NumPy's array buffers
and zlib's output alike.
"""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from helpers import SMALL_DEFAULT_RATES
from helpers import make_agent as shared_make_agent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib import format as npy

from ember_np import CheckpointError, DqnAgent, DqnPolicy
from ember_np.checkpoint import MAX_MEMBERS, inspect_archive, load_arrays

SMALL = SMALL_DEFAULT_RATES
PEAK_LIMIT = 2 << 20  # bytes a refusal may allocate (the bombs and huge shapes declare >= 8x)


make_agent = partial(shared_make_agent, config=SMALL, seed=0, obs_size=4)


_GOOD: dict[str, bytes] = {}


@pytest.fixture(scope="module")
def good_members(tmp_path_factory) -> dict[str, bytes]:
    """The raw ``.npy`` members of a valid checkpoint, by member name."""
    path = make_agent().save(tmp_path_factory.mktemp("ck") / "good.npz", include_buffer=True)
    with zipfile.ZipFile(path) as z:
        _GOOD.update({info.filename: z.read(info) for info in z.infolist()})
    return dict(_GOOD)


def npy_bytes(header_shape, dtype="<f4", payload: bytes = b"") -> bytes:
    """A ``.npy`` stream whose header declares ``header_shape``, followed by ``payload``."""
    buf = io.BytesIO()
    npy.write_array_header_1_0(
        buf, {"descr": dtype, "fortran_order": False, "shape": tuple(header_shape)}
    )
    return buf.getvalue() + payload


def zip_bytes(members: dict[str, bytes], deflate: frozenset[str] = frozenset()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            method = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
            z.writestr(zipfile.ZipInfo(name), data, compress_type=method, compresslevel=1)
    return buf.getvalue()


def patch_central_size(blob: bytes, name: str, new_size: int, compressed: bool = False) -> bytes:
    """Make the central directory lie about one member's (un)compressed size."""
    out = bytearray(blob)
    at = out.find(b"PK\x01\x02" + b"", 0)
    while at >= 0:
        (name_len,) = struct.unpack("<H", out[at + 28 : at + 30])
        if out[at + 46 : at + 46 + name_len].decode() == name:
            field = 20 if compressed else 24
            out[at + field : at + field + 4] = struct.pack("<L", new_size & 0xFFFFFFFF)
            return bytes(out)
        at = out.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"{name} not in the central directory")


_BOMBS: dict[int, bytes] = {}


def bomb(megabytes: int) -> bytes:
    """A checkpoint whose ``online/adam_m`` is ``megabytes`` MiB of zeros deflated ~200x."""
    if megabytes not in _BOMBS:
        n = (megabytes << 20) // 4
        members = dict(_GOOD)
        members["online/adam_m.npy"] = npy_bytes((n,), payload=bytes(n * 4))
        _BOMBS[megabytes] = zip_bytes(members, deflate=frozenset({"online/adam_m.npy"}))
    return _BOMBS[megabytes]


def hostile(kind: str, good: dict[str, bytes], data) -> bytes:
    """One hostile archive of ``kind``; the rest of the checkpoint is valid."""
    members = dict(good)
    name = data.draw(st.sampled_from(sorted(members)), label="member")
    if kind == "huge_shape":  # the .npy header declares far more than the member holds
        dims = data.draw(st.lists(st.integers(1, 2**20), min_size=1, max_size=4), label="dims")
        dims[0] *= 1 << 24  # >= 64 MiB of float32 whatever the other dims
        members[name] = npy_bytes(dims, payload=bytes(16))
        return zip_bytes(members)
    if kind == "lying_directory":  # the zip declares a huge member that is not in the file
        shape = data.draw(st.integers(1 << 22, 1 << 28), label="elements")
        members[name] = npy_bytes((shape,), payload=bytes(64))
        blob = zip_bytes(members)
        size = len(npy_bytes((shape,))) + 4 * shape
        return patch_central_size(patch_central_size(blob, name, size), name, size, compressed=True)
    if kind == "zip_bomb":  # honest sizes, but 16-32 MiB from a ~100 kB member
        return bomb(data.draw(st.sampled_from([16, 32]), label="MiB"))
    if kind == "mismatched_sizes":  # the .npy header or the zip is off by a few elements/bytes
        dtype, shape, header = inspect_npy(members[name])
        delta = data.draw(st.integers(-8, 8).filter(bool), label="delta")
        if data.draw(st.booleans(), label="in the header"):
            n = int(np.prod(shape))
            declared = abs(n + delta)
            if declared == n:  # delta == -2n would declare the true shape again
                declared = n + abs(delta)
            members[name] = npy_bytes((declared,), dtype.str, members[name][header:])
            return zip_bytes(members)
        return patch_central_size(zip_bytes(members), name, len(members[name]) + delta)
    if kind == "many_members":
        count = data.draw(st.integers(MAX_MEMBERS + 1, MAX_MEMBERS + 40), label="count")
        for i in range(count - len(members)):
            members[f"junk{i}.npy"] = npy_bytes((1,), payload=bytes(4))
        return zip_bytes(members)
    if kind == "many_members_declared":  # an end record announcing millions of members
        blob = zip_bytes(members)
        at = blob.rfind(b"PK\x05\x06")
        count = data.draw(st.integers(MAX_MEMBERS + 1, 0xFFFE), label="count")
        return blob[: at + 8] + struct.pack("<HH", count, count) + blob[at + 12 :]
    raise AssertionError(kind)


def inspect_npy(data: bytes):
    buf = io.BytesIO(data)
    npy.read_magic(buf)
    shape, _, dtype = npy.read_array_header_1_0(buf)
    return dtype, shape, buf.tell()


LOADERS = {
    "DqnAgent.from_checkpoint": DqnAgent.from_checkpoint,
    "DqnAgent.load": lambda p: make_agent().load(p),
    "DqnPolicy.load": DqnPolicy.load,
    "load_arrays": load_arrays,
}
KINDS = ["huge_shape", "lying_directory", "zip_bomb", "mismatched_sizes", "many_members",
         "many_members_declared"]  # fmt: skip


def refused_with_little_memory(load, path: Path) -> tuple[str, int]:
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError) as info:
            load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return str(info.value), peak


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kind=st.sampled_from(KINDS), loader=st.sampled_from(sorted(LOADERS)), data=st.data())
def test_hostile_archives_are_refused_before_allocating(good_members, tmp_path, kind, loader, data):
    path = tmp_path / "hostile.npz"
    path.write_bytes(hostile(kind, good_members, data))
    message, peak = refused_with_little_memory(LOADERS[loader], path)
    assert str(path) in message
    assert peak < PEAK_LIMIT, f"{kind}: {loader} allocated {peak} bytes before refusing"


def test_the_load_budget_bounds_an_honest_archive(tmp_path):
    """A well-formed archive bigger than the budget is refused; within it, it loads."""
    path = tmp_path / "big.npz"
    np.savez(path, a=np.ones(1 << 20, np.float32), b=np.ones(1 << 20, np.float32))  # 8 MiB
    message, peak = refused_with_little_memory(lambda p: load_arrays(p, max_bytes=6 << 20), path)
    assert "8.0 MiB, more than the 6.0 MiB this load may use" in message
    assert peak < PEAK_LIMIT
    arrays = load_arrays(path, max_bytes=8 << 20)
    assert arrays["a"].sum() == 1 << 20
    info = inspect_archive(path)
    assert info["a"].shape == (1 << 20,) and info["a"].nbytes == 4 << 20


def test_a_recompressed_checkpoint_still_loads(good_members, tmp_path):
    """Deflate is allowed within its ratio bound: savez_compressed of a trained agent loads."""
    agent = make_agent()
    data = np.random.default_rng(0)
    path = tmp_path / "c.npz"
    arrays = agent.state_arrays()
    arrays["online/adam_m"] = data.standard_normal(arrays["online/adam_m"].shape).astype(np.float32)
    arrays["online/adam_v"] = np.abs(arrays["online/adam_m"])
    np.savez_compressed(path, **arrays)
    restored = DqnAgent.from_checkpoint(path)
    assert np.array_equal(restored.online.state_dict()["adam_m"], arrays["online/adam_m"])


def test_load_arrays_skips_members_but_still_checks_them(good_members, tmp_path):
    """``skip`` (what ``DqnPolicy.load`` passes) leaves members unread, never unchecked."""
    path = tmp_path / "good.npz"
    path.write_bytes(zip_bytes(good_members))
    skip = ("target/", "buffer/", "online/adam_")
    full, part = load_arrays(path), load_arrays(path, skip=skip)
    assert any(k.startswith("buffer/") for k in full)
    assert set(part) == {k for k in full if not k.startswith(skip)}
    for key, value in part.items():
        assert value.dtype == full[key].dtype and np.array_equal(value, full[key])
    assert DqnPolicy.load(path).act_batch(np.eye(4, dtype=np.float32)).tolist() == (
        make_agent().into_policy().act_batch(np.eye(4, dtype=np.float32)).tolist()
    )
    skipped = sorted(name for name in good_members if name.startswith(skip))
    for name in (skipped[0], skipped[-1]):  # a hostile member the policy would not read
        members = dict(good_members)
        members[name] = npy_bytes((1 << 26,), payload=bytes(16))
        path.write_bytes(zip_bytes(members))
        message, peak = refused_with_little_memory(DqnPolicy.load, path)
        assert repr(name[: -len(".npy")]) in message and peak < PEAK_LIMIT
