"""Writes the seed corpus of the runtime's fuzz targets (runtime/fuzz/corpus/):
small valid inputs and near-valid ones (one field wrong), so each target
starts past its first checks. Deterministic; run from the repository root:

    python3 runtime/fuzz/make_seeds.py

The input layouts are those the targets read (runtime/fuzz/README.md). The
real NEFF seeds (corpus/fuzz_neff_elf/valid-noop-so and its first 3000
bytes, near-noop-so-truncated) is a compiled test kernel and
is not made here (the README says how it was built)."""
from __future__ import annotations

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def write(target: str, name: str, data: bytes) -> None:
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- fuzz_neff_elf: ELF headers ------------------------------------------
ET_DYN, EM_X86_64, EM_AARCH64, PT_LOAD, PT_DYNAMIC = 3, 62, 183, 1, 2


def elf(*, cls=2, etype=ET_DYN, machine=EM_X86_64, phoff=64, phentsize=56, phnum=None,
        segments=((PT_LOAD, 0, 0x100), (PT_DYNAMIC, 0xb0, 0x40)), total=0x100) -> bytes:
    ident = b"\x7fELF" + bytes([cls, 1, 1, 0]) + bytes(8)
    if phnum is None:
        phnum = len(segments)
    eh = ident + struct.pack("<HHIQQQIHHHHHH", etype, machine, 1, 0, phoff, 0, 0, 64,
                             phentsize, phnum, 64, 0, 0)
    body = bytearray(eh)
    body += bytes(max(0, phoff - len(body)))
    for ptype, off, filesz in segments:
        body += struct.pack("<IIQQQQQQ", ptype, 5, off, off, off, filesz, filesz, 0x1000)
    body += bytes(max(0, total - len(body)))
    return bytes(body)


def neff_elf_seeds() -> None:
    t = "fuzz_neff_elf"
    write(t, "valid-x86_64", elf())
    write(t, "valid-aarch64", elf(machine=EM_AARCH64))
    write(t, "no-segments", elf(segments=(), total=64))
    write(t, "near-32bit", elf(cls=1))
    write(t, "near-executable", elf(etype=2))
    write(t, "near-machine", elf(machine=3))
    write(t, "near-phentsize", elf(phentsize=32))
    write(t, "near-phoff-past-end", elf(phoff=0x1000, segments=(), total=64))
    write(t, "near-phnum-past-end", elf(phnum=9))
    write(t, "near-segment-past-end", elf(segments=((PT_LOAD, 0, 0x1000),)))
    write(t, "near-dynamic-past-end", elf(segments=((PT_LOAD, 0, 0x100), (PT_DYNAMIC, 0xf0, 0x40))))
    write(t, "near-short", elf()[:63])
    write(t, "near-magic", b"\x7fELG" + elf()[4:])


# ---- fuzz_neff_desc: descriptors -------------------------------------------
def tensor(name: bytes, dtype: int, shape: list[int], *, alias: int = -1, size: int | None = None,
           name_null=False, shape_null=False) -> bytes:
    flags = (0x01 if name_null else 0) | (0x08 if shape_null else 0) | (0x10 if size is not None else 0)
    long_name = len(name) >= 250
    if long_name:
        flags |= 0x40
    out = bytes([flags])
    out += bytes([(len(name) - 250) if long_name else len(name)]) + name
    out += bytes([dtype]) + bytes([len(shape)])
    for e in shape:
        out += bytes([e]) if 0 <= e < 0x80 else b"\x80" + struct.pack("<q", e)
    if size is not None:
        out += struct.pack("<Q", size)
    out += struct.pack("<b", alias)
    return out


def desc(ins: list[bytes], outs: list[bytes], *, name=b"k", flags=0, struct_size=None,
         abi=None, scratch=0, nulls=0, rank_world=None) -> bytes:
    if struct_size is not None:
        flags |= 0x01
    if abi is not None:
        flags |= 0x02
    out = bytes([flags])
    if struct_size is not None:
        out += struct.pack("<I", struct_size)
    if abi is not None:
        out += struct.pack("<I", abi)
    out += bytes([len(name)]) + name
    out += bytes([scratch])
    if rank_world is not None:
        nulls |= 0x20
    out += bytes([len(ins), len(outs), nulls])
    if rank_world is not None:
        out += struct.pack("<bb", *rank_world)
    for t in ins + outs:
        out += t
    return out


def neff_desc_seeds() -> None:
    t = "fuzz_neff_desc"
    f32, f16, i64 = 1, 2, 10
    x = tensor(b"x", f32, [4])
    o = tensor(b"o0", f32, [4])
    write(t, "valid-unary", desc([x], [o]))
    write(t, "valid-binary-scratch", desc([x, tensor(b"y", f32, [4])], [o], scratch=2))
    write(t, "valid-scalar", desc([tensor(b"s", i64, [])], [tensor(b"o0", i64, [])]))
    write(t, "valid-inplace", desc([x], [tensor(b"x", f32, [4], alias=0)]))
    write(t, "valid-rank8", desc([tensor(b"x", f16, [1, 2, 1, 2, 1, 2, 1, 2])],
                                 [tensor(b"o0", f16, [16])]))
    write(t, "valid-zero-extent", desc([tensor(b"x", f32, [0, 5])], [tensor(b"o0", f32, [0])]))
    write(t, "valid-no-tensors", desc([], []))
    write(t, "valid-name-255", desc([tensor(b"n" * 255, f32, [1])], [tensor(b"o0", f32, [1])]))
    write(t, "near-name-256", desc([tensor(b"n" * 256, f32, [1])], [tensor(b"o0", f32, [1])]))
    write(t, "near-size", desc([tensor(b"x", f32, [4], size=15)], [o]))
    write(t, "near-dtype", desc([tensor(b"x", 14, [4], size=16)], [o]))
    write(t, "near-rank9", desc([tensor(b"x", f32, [1] * 9)], [o]))
    write(t, "near-negative-extent", desc([tensor(b"x", f32, [-1], size=0)], [o]))
    write(t, "near-overflow", desc([tensor(b"x", f32, [1 << 62, 4], size=0)], [o]))
    write(t, "near-alias-range", desc([x], [tensor(b"o0", f32, [4], alias=1)]))
    write(t, "near-alias-size", desc([x], [tensor(b"o0", f32, [8], alias=0)]))
    write(t, "near-dup-input", desc([x, x], [o]))
    write(t, "near-dup-output", desc([x], [o, o]))
    write(t, "near-output-named-like-input", desc([x], [tensor(b"x", f32, [4])]))
    write(t, "near-abi", desc([x], [o], abi=2))
    write(t, "near-struct-size", desc([x], [o], struct_size=8))
    write(t, "near-no-name", desc([x], [o], name=b""))
    write(t, "near-name-null", desc([x], [o], flags=0x08))
    write(t, "near-no-kernel", desc([x], [o], flags=0x10))
    write(t, "near-table-null", desc([x], [o], nulls=1))
    write(t, "near-tensor-name-null", desc([tensor(b"x", f32, [4], name_null=True)], [o]))
    write(t, "valid-rank1-of-2", desc([x], [o], rank_world=(1, 2)))
    write(t, "near-rank-2-of-2", desc([x], [o], rank_world=(2, 2)))
    write(t, "near-world-0", desc([x], [o], rank_world=(0, 0)))
    write(t, "near-query-null", desc([x], [o], nulls=0x04))
    write(t, "near-no-entry", desc([x], [o], nulls=0x08))
    write(t, "near-core-1", desc([x], [o], nulls=0x10))
    write(t, "near-shape-null", desc([tensor(b"x", f32, [4], shape_null=True)], [o]))
    # counts above the limit: flag 0x40, then two 16-bit counts
    big = bytes([0x40]) + b"\x01k" + b"\x00" + b"\x01\x01" + struct.pack("<HH", 4097, 1) + b"\x00"
    write(t, "near-too-many", big + x + o)


# ---- fuzz_env: NUL-separated variable values --------------------------------
def env_seeds() -> None:
    t = "fuzz_env"
    cases = {
        "valid-all": b"4G\x000-3,5\x002\x0064M",
        "valid-bytes": b"1048576\x000\x001",
        "valid-suffixes": b"512MiB\x00 1 - 2 , 7 \x0016\x001TB",
        "valid-unset": b"",
        "valid-empty": b"\x00\x00\x00",
        "near-size-suffix": b"4X\x000",
        "near-size-huge": b"18446744073709547520\x000",
        "near-size-overflow": b"17179869184G\x000",
        "near-size-small": b"1K\x000",
        "near-list-reversed": b"\x003-1",
        "near-list-range": b"\x0031-32",
        "near-list-trailing": b"\x000,",
        "near-list-huge": b"\x0099999999999999999999",
        "near-workers-zero": b"\x00\x000",
        "near-workers-big": b"\x00\x001025",
        "near-workers-text": b"\x00\x004x",
        "near-pack-limit": b"\x00\x00\x00-1",
    }
    for name, data in cases.items():
        write(t, name, data)


# ---- fuzz_cc_timeout: the variable's text -----------------------------------
def cc_timeout_seeds() -> None:
    t = "fuzz_cc_timeout"
    for name, data in {"valid-300": b"300", "valid-fraction": b"0.25", "valid-exp": b"1e3",
                       "valid-empty": b"", "near-zero": b"0", "near-negative": b"-5",
                       "near-text": b"abc", "near-unit": b"5s", "near-nan": b"nan"}.items():
        write(t, name, data)


if __name__ == "__main__":
    neff_elf_seeds()
    neff_desc_seeds()
    env_seeds()
    cc_timeout_seeds()
