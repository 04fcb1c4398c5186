"""``load_arrays`` reads archives without ``zipfile``: it must read what ``np.load`` reads.

The reference is ``np.load(..., allow_pickle=False)`` on the same file: every
dtype and layout ember_np writes or a user may recompress (stored, deflated,
ZIP64 records, Fortran order, 0-d, empty, structured, big-endian, unicode),
and the CRC-32 check that catches a flipped data byte.
"""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from ember_np import CheckpointError
from ember_np.checkpoint import inspect_archive, load_arrays


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    record = np.dtype([("obs", "<f4", (3,)), ("action", "<i8"), ("done", "?")])
    return {
        "f32": rng.standard_normal((5, 7)).astype(np.float32),
        "fortran": np.asfortranarray(rng.standard_normal((4, 3))),
        "big_endian": np.arange(6, dtype=">i4"),
        "scalar": np.array(3, dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "text": np.array('{"type": "VecEncoder", "shape": [4]}'),
        "records": np.zeros(4, dtype=record),
        "bits": np.packbits(rng.integers(0, 2, 19, dtype=np.uint8)),
        "large": rng.standard_normal(300_000).astype(np.float32),  # > one 1 MiB read
    }


def assert_same_as_np_load(path) -> None:
    ours = load_arrays(path)
    with np.load(path, allow_pickle=False) as reference:
        assert list(ours) == list(reference.files)
        for key in reference.files:
            expected = reference[key]
            assert ours[key].dtype == expected.dtype, key
            assert ours[key].shape == expected.shape, key
            assert ours[key].flags.f_contiguous == expected.flags.f_contiguous, key
            assert ours[key].tobytes() == expected.tobytes(), key
    info = inspect_archive(path)
    assert {k: (v.dtype, v.shape) for k, v in info.items()} == {
        k: (v.dtype, v.shape) for k, v in ours.items()
    }


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_reads_what_np_load_reads(tmp_path, save):
    path = tmp_path / "a.npz"
    save(path, **arrays())
    assert_same_as_np_load(path)


def test_reads_zip64_records(tmp_path, monkeypatch):
    """Members past 4 GiB get ZIP64 sizes and offsets; a lowered limit makes small ones do."""
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 64)
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
    path = tmp_path / "z64.npz"
    np.savez(path, **arrays())
    monkeypatch.undo()
    blob = path.read_bytes()
    assert b"PK\x06\x06" in blob  # the ZIP64 end record is there
    assert_same_as_np_load(path)


def test_a_flipped_data_byte_fails_the_crc_check(tmp_path):
    path = tmp_path / "a.npz"
    data = arrays()
    np.savez(path, **data)
    blob = bytearray(path.read_bytes())
    at = blob.find(data["large"][1000:1004].tobytes())
    blob[at] ^= 0x40
    path.write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="CRC-32") as info:
        load_arrays(path)
    assert str(path) in str(info.value)
    with pytest.raises(zipfile.BadZipFile, match="CRC"):  # what np.load says about it
        with np.load(path) as z:
            z["large"]
    assert set(load_arrays(path, skip=("large",))) == set(data) - {"large"}  # not read: not checked
