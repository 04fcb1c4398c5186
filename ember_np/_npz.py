"""The zip layer of an ``.npz`` archive, read with ``struct`` and ``zlib`` alone.

``np.load`` reads archives through :mod:`zipfile`, whose imports (``shutil``,
``bz2``, ``lzma``, ``pathlib``, ``urllib.parse``, ``ipaddress``, ``threading``)
cost a deployed policy more start-up time than all of ember_np (issue 16's
first-action bar). An ``.npz`` needs little of the zip format: the end record,
the central directory, each member's local header, and stored or deflated
data with its CRC-32. This module reads exactly that; ``checkpoint.py``
decides what an archive may declare and reads each member's ``.npy`` stream
through :class:`MemberStream` with ``numpy.lib.format`` (which NumPy imports
itself).

Layout (PKWARE APPNOTE 4.3): the end of central directory record (``PK\\5\\6``,
with a ZIP64 end record before it when a count or size overflows) locates
the central directory, one 46-byte entry (``PK\\1\\2``) per member; each
entry points at the member's 30-byte local header (``PK\\3\\4``), after which
the member's data follows.
"""

from __future__ import annotations

import struct
import zlib
from typing import IO, NamedTuple

__all__ = ["DEFLATED", "STORED", "Entry", "MemberStream", "central_directory",
           "data_start", "end_of_central_directory"]  # fmt: skip

STORED = 0
DEFLATED = 8
#: Bytes read from the file per step while inflating or copying a member.
CHUNK = 1 << 20

_END = struct.Struct("<4s4H2LH")  # signature, disks, counts, directory size and offset, comment
_ENTRY = struct.Struct("<4s4B4HL2L5H2L")  # a central directory entry, before its name
_LOCAL = struct.Struct("<4s2B4HL2L2H")  # a local file header, before its name
_ZIP64 = 0x0001  # extra field of ZIP64 sizes and offset
_UTF8 = 0x800  # flag bit: the name is UTF-8 (else code page 437)


class Entry(NamedTuple):
    """One member as the central directory declares it."""

    name: str
    flags: int  # general purpose bits (bit 0: encrypted)
    method: int  # STORED, DEFLATED or another (refused by the caller)
    crc: int  # CRC-32 of the uncompressed data
    compress_size: int  # bytes in the file
    file_size: int  # bytes once uncompressed
    header_offset: int  # where the member's local header starts


def end_of_central_directory(f: IO[bytes], size: int) -> tuple[int, int, int]:
    """(number of members, central directory size, its offset) from the end record.

    Read before anything else, so a small file listing a million members is
    refused before any entry is parsed.
    """
    tail_len = min(size, _END.size + 65_535)  # the fixed record plus the longest comment
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < _END.size:
        raise ValueError("not a zip archive (no end of central directory record)")
    _, _, _, _, count, cd_size, cd_offset, _ = _END.unpack_from(tail, at)
    if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        loc = tail[at - 20 : at] if at >= 20 else b""  # ZIP64: the real values are elsewhere
        if loc[:4] != b"PK\x06\x07":
            raise ValueError("a ZIP64 archive without its ZIP64 locator")
        (offset,) = struct.unpack_from("<Q", loc, 8)
        if offset + 56 > size:
            raise ValueError("the ZIP64 end record lies outside the file")
        f.seek(offset)
        record = f.read(56)
        if record[:4] != b"PK\x06\x06":
            raise ValueError("a ZIP64 archive without its ZIP64 end record")
        count, cd_size, cd_offset = struct.unpack_from("<3Q", record, 32)
    if cd_offset + cd_size > size:
        raise ValueError(f"the central directory ({cd_size} bytes at {cd_offset}) lies "
                         f"outside the {size}-byte file")  # fmt: skip
    return count, cd_size, cd_offset


def central_directory(f: IO[bytes], count: int, cd_size: int, cd_offset: int) -> list[Entry]:
    """The ``count`` entries of the central directory (``cd_size`` bytes at ``cd_offset``)."""
    f.seek(cd_offset)
    directory = f.read(cd_size)
    entries: list[Entry] = []
    at = 0
    for _ in range(count):
        if at + _ENTRY.size > len(directory):
            raise ValueError(f"the central directory ends after {len(entries)} of {count} entries")
        (signature, _, _, _, _, flags, method, _, _, crc, compress_size, file_size,
         name_len, extra_len, comment_len, _, _, _, header_offset) = _ENTRY.unpack_from(
            directory, at)  # fmt: skip
        if signature != b"PK\x01\x02":
            raise ValueError(f"central directory entry {len(entries)} has a bad signature")
        at += _ENTRY.size
        raw_name = directory[at : at + name_len]
        extra = directory[at + name_len : at + name_len + extra_len]
        at += name_len + extra_len + comment_len
        if at > len(directory):
            raise ValueError(f"central directory entry {len(entries)} runs past the directory")
        name = _decode_name(raw_name, flags)
        # ZIP64 fields, in this order, replace those of the entry that read 0xFFFFFFFF.
        wide = [v for v in (file_size, compress_size, header_offset) if v == 0xFFFFFFFF]
        if wide:
            values = list(_zip64_values(extra, len(wide), name))
            if file_size == 0xFFFFFFFF:
                file_size = values.pop(0)
            if compress_size == 0xFFFFFFFF:
                compress_size = values.pop(0)
            if header_offset == 0xFFFFFFFF:
                header_offset = values.pop(0)
        entries.append(Entry(name, flags, method, crc, compress_size, file_size, header_offset))
    return entries


def _decode_name(raw: bytes, flags: int) -> str:
    """A member name: UTF-8 when flagged, else code page 437 (ASCII needs neither codec)."""
    if raw.isascii():  # numpy's member names; spares importing the cp437 codec
        return raw.decode("ascii")
    return raw.decode("utf-8" if flags & _UTF8 else "cp437")


def _zip64_values(extra: bytes, n: int, name: str) -> tuple[int, ...]:
    """The first ``n`` 8-byte values of the ZIP64 field among an entry's extra fields."""
    at = 0
    while at + 4 <= len(extra):
        field, length = struct.unpack_from("<2H", extra, at)
        if field == _ZIP64 and length >= 8 * n:
            return struct.unpack_from(f"<{n}Q", extra, at + 4)
        at += 4 + length
    raise ValueError(f"member {name!r} lacks the ZIP64 sizes its entry refers to")


def data_start(f: IO[bytes], entry: Entry) -> int:
    """Offset of the member's data: checks its local header against the entry."""
    f.seek(entry.header_offset)
    header = f.read(_LOCAL.size)
    if len(header) < _LOCAL.size or header[:4] != b"PK\x03\x04":
        raise ValueError(f"member {entry.name!r} has no local header at {entry.header_offset}")
    name_len, extra_len = _LOCAL.unpack(header)[-2:]
    raw_name = f.read(name_len)
    if _decode_name(raw_name, entry.flags) != entry.name:
        raise ValueError(f"member {entry.name!r} is named {raw_name!r} in its local header")
    return entry.header_offset + _LOCAL.size + name_len + extra_len


class MemberStream:
    """The uncompressed bytes of one member, read front to back.

    ``read`` and ``readinto`` never return fewer bytes than asked for within
    the member (a short file or stream raises ValueError); :meth:`finish`
    checks that all ``entry.file_size`` bytes were read and their CRC-32.
    Inflating never produces more than asked for, so a zip bomb costs only
    what the caller reads.
    """

    def __init__(self, f: IO[bytes], entry: Entry, start: int) -> None:
        f.seek(start)
        self._f = f
        self._entry = entry
        self._raw_left = entry.compress_size  # compressed bytes not read from the file
        self._left = entry.file_size  # uncompressed bytes not yet returned
        self._inflate = zlib.decompressobj(-15) if entry.method == DEFLATED else None
        self._crc = 0

    def read(self, n: int) -> bytes:
        """The next ``min(n, bytes left)`` bytes."""
        n = min(n, self._left)
        if self._inflate is None:
            data = self._f.read(min(n, self._raw_left))
            self._raw_left -= len(data)
        else:
            data = self._inflated(n)
        if len(data) < n:
            raise ValueError(f"member {self._entry.name!r} ends {self._left - len(data)} bytes "
                             "early (truncated or corrupted)")  # fmt: skip
        self._left -= n
        self._crc = zlib.crc32(data, self._crc)
        return data

    def _inflated(self, n: int) -> bytes:
        assert self._inflate is not None
        parts = []
        wanted = n
        while wanted and not self._inflate.eof:
            raw = self._inflate.unconsumed_tail
            if not raw:
                raw = self._f.read(min(self._raw_left, CHUNK))
                self._raw_left -= len(raw)
                if not raw:
                    break
            parts.append(self._inflate.decompress(raw, wanted))
            wanted -= len(parts[-1])
        return b"".join(parts)

    def tell(self) -> int:
        """Uncompressed bytes read so far."""
        return self._entry.file_size - self._left

    def readinto(self, buffer: memoryview) -> None:
        """Fill ``buffer`` (writeable bytes) with the next ``len(buffer)`` bytes."""
        if len(buffer) > self._left:
            raise ValueError(f"member {self._entry.name!r} holds {self._left} more bytes, "
                             f"not {len(buffer)}")  # fmt: skip
        at = 0
        while at < len(buffer):
            data = self.read(min(len(buffer) - at, CHUNK))
            buffer[at : at + len(data)] = data
            at += len(data)

    def finish(self) -> None:
        """Raise ValueError unless every byte was read and the CRC-32 matches."""
        if self._left:
            raise ValueError(f"member {self._entry.name!r}: {self._left} bytes left unread")
        if self._crc != self._entry.crc:
            raise ValueError(f"member {self._entry.name!r} fails its CRC-32 check (corrupted)")
