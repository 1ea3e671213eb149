"""Bare-metal C programs for firebrand's RV32IM machine, and how to build them.

    from tw_examples.rv32 import build, PROGRAMS
    elf = build("fib", "/tmp/fib.elf", ram_bytes=8192)   # a bundled program (PROGRAMS)
    elf = build(["my.c"], "/tmp/my.elf")                 # your own sources

The runtime: crt0.S (stack at the top of RAM, main(), the exit call with main's result),
link.ld (RAM from address 0, the code first), tw_rt.c / tw_rt.h (console output through the
write call; memset and memcpy, which gcc may call on its own). The command is Debian's
`riscv64-unknown-elf-gcc -march=rv32im -mabi=ilp32 -ffreestanding -nostdlib -O2` with the
linker script and `--defsym=__ram_bytes=N` (COMMAND below); `build` runs it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME = ("crt0.S", "tw_rt.c")
# name -> what it exercises (each prints a line or two and exits with a code)
PROGRAMS = {
    "hello": "one line and exit code 7 (the smallest run)",
    "fib": "loops and recursion (the stack)",
    "sort": "insertion sort of a pseudo-random array (loads, stores, signed compares)",
    "sieve": "the sieve of Eratosthenes below 400 (byte stores, nested loops)",
    "crc": "CRC-32 bit by bit (shifts, xor, masks)",
    "divide": "digit sums by / and % (the machine's microcoded division), signed and unsigned",
    "collatz": "Collatz step counts (branches, multiplication)",
}
GCC = "riscv64-unknown-elf-gcc"
COMMAND = [GCC, "-march=rv32im", "-mabi=ilp32", "-ffreestanding", "-nostdlib", "-O2", "-Wall",
           "-Wl,--no-warn-rwx-segments"]


class BuildError(RuntimeError):
    """The cross compiler is missing, or it refused the program (its message, one line)."""


def have_gcc() -> bool:
    return shutil.which(GCC) is not None


def build(program, out, ram_bytes: int = 8192) -> bytes:
    """Compile a bundled program (a name in PROGRAMS) or C/assembly sources into a bare-metal
    RV32IM ELF at `out` for `ram_bytes` of RAM; returns the ELF's bytes."""
    if not have_gcc():
        raise BuildError(f"{GCC} not found (Debian: apt-get install gcc-riscv64-unknown-elf)")
    if isinstance(program, str) and program in PROGRAMS:
        sources = [str(HERE / f"{program}.c")]
    elif isinstance(program, str):
        raise BuildError(f"unknown program {program!r} (bundled: {', '.join(PROGRAMS)})")
    else:
        sources = [str(s) for s in program]
    cmd = [*COMMAND, f"-I{HERE}", "-T", str(HERE / "link.ld"),
           f"-Wl,--defsym=__ram_bytes={int(ram_bytes)}", "-o", str(out),
           *(str(HERE / r) for r in RUNTIME), *sources]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if "error" in ln] or \
            done.stderr.strip().splitlines() or ["(no message)"]
        raise BuildError(f"{GCC} failed: {lines[0]}")
    return Path(out).read_bytes()
