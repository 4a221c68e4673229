"""CI only: make the PoCL that pyopencl's wheel bundles build kernels on a CPU its LLVM does
not know.

pyopencl 2026.1.4's wheel bundles PoCL 3.0-rc2 with LLVM 14, which names an AMD family 26
CPU (Zen 5) "generic", a name its own clang then refuses: every build fails with "unknown
target CPU 'generic'", in plain pyopencl as in this project. PoCL 3.0 has no setting for the
CPU, so on such a machine this script patches the copy of libpocl in the given virtual
environment (nothing else) so that PoCL targets x86-64-v3, which every x86-64 CPU of the last
ten years runs: the call that asks LLVM for the host's name is skipped and PoCL's own
fallback name, "generic", is replaced by "x86-64-v3" (a string the library already holds).
Where PoCL builds as it is, it does nothing. It checks every byte it changes against the
build it knows and refuses anything else.

Usage: python .ci/pocl_cpu.py   (with the virtual environment's python)
"""

from __future__ import annotations

import glob
import os
import struct
import subprocess
import sys

PROBE = """
import pyopencl as cl
ctx = cl.Context(dev_type=cl.device_type.ALL)
cl.Program(ctx, "__kernel void probe(__global int *x) { x[0] = 1; }").build()
"""

# pocl_get_llvm_cpu_name: ask LLVM for the host's name; if it is empty, fall back to "generic"
_CALL = bytes.fromhex("4883ec08e8")  # sub rsp, 8; call llvm::sys::getHostCPUName (rel32)
_AFTER_CALL = bytes.fromhex("4885d27430488 9c54889d3488d7a01".replace(" ", ""))
_FALLBACK = bytes.fromhex("bf08000000bb07000000488d2d")  # mov edi,8; mov ebx,7; lea rbp,[rip+..]


def builds() -> tuple[bool, str]:
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    return r.returncode == 0, r.stderr


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(file offset, virtual address, size) of each PT_LOAD segment of an ELF64 file."""
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    out = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == 1:
            out.append((p_offset, p_vaddr, p_filesz))
    return out


def _vaddr(segments: list[tuple[int, int, int]], offset: int) -> int:
    for off, vaddr, size in segments:
        if off <= offset < off + size:
            return vaddr + offset - off
    raise ValueError(f"file offset {offset:#x} is in no loaded segment")


def patch(path: str) -> None:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if data[:4] != b"\x7fELF":
        raise SystemExit(f"{path}: not an ELF file")
    segs = _segments(bytes(data))
    starts = []
    at = 0
    while (at := data.find(_CALL, at)) != -1:
        if data[at + 9 : at + 9 + len(_AFTER_CALL)] == _AFTER_CALL:
            starts.append(at)
        at += 1
    if len(starts) != 1:
        raise SystemExit(f"{path}: pocl_get_llvm_cpu_name not found as known ({len(starts)})")
    call = starts[0] + 4  # the call instruction
    fallback = data.find(_FALLBACK, call, call + 0x80)
    if fallback < 0:
        raise SystemExit(f"{path}: PoCL's fallback CPU name not found as known")
    lea = fallback + 10  # lea rbp, [rip + rel32]
    (rel,) = struct.unpack_from("<i", data, lea + 3)
    generic = _vaddr(segs, lea + 7) + rel
    target = data.find(b"\0x86-64-v3\0") + 1
    if target <= 0:
        raise SystemExit(f"{path}: no 'x86-64-v3' string to point to")
    # checks: the fallback names "generic" (in the file at the same address)
    gen_off = next(off + generic - v for off, v, s in segs if v <= generic < v + s)
    if bytes(data[gen_off : gen_off + 8]) != b"generic\0":
        raise SystemExit(f"{path}: PoCL's fallback is not 'generic' as known")
    data[call : call + 5] = bytes.fromhex("31d20f1f00")  # xor edx, edx (an empty name); nop
    data[fallback : fallback + 10] = bytes.fromhex("bf0a000000bb09000000")  # 10 bytes, 9 chars
    struct.pack_into("<i", data, lea + 3, _vaddr(segs, target) - _vaddr(segs, lea + 7))
    tmp = path + ".patched"
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, os.stat(path).st_mode)
    os.replace(tmp, path)


def main() -> None:
    ok, err = builds()
    if ok:
        return
    if "unknown target CPU 'generic'" not in err:
        raise SystemExit(f"CI: PoCL does not build a kernel here:\n{err}")
    import pyopencl

    libs = glob.glob(os.path.join(os.path.dirname(pyopencl.__file__), ".libs", "libpocl*.so*"))
    if len(libs) != 1:
        raise SystemExit(f"CI: PoCL's LLVM does not know this CPU, and no bundled libpocl: {libs}")
    patch(libs[0])
    ok, err = builds()
    if not ok:
        raise SystemExit(f"CI: PoCL still does not build after the patch:\n{err}")
    print(
        "CI: the PoCL bundled with pyopencl does not know this CPU (its LLVM 14 names it "
        f"'generic'); patched {libs[0]} to target x86-64-v3",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
