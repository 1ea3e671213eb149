"""RISC-V programs on firebrand's RV32IM machine, compiled by tw: ELF loading, runs, output.

    from tw_frontends.firebrand.rv32 import RV32, load_elf
    rv = RV32(ram_bytes=8192)                 # firebrand's RV32Spec, compiled by tw on demand
    run = rv.run(open("prog.elf", "rb").read())
    run.console, run.exit_code, run.instructions, run.tokens_per_s

The machine is firebrand's (`firebrand.machines.rv32`): tokens are bytes plus HALT (-1); the
prompt holds all of RAM (RAM address a is position a), the registers and a resume record; each
instruction appends one 10-token record (next pc, value, key), a division 64 micro-records
more. tw compiles its expression graph with `compile_machine` (`lowering/machines.py`) and runs
it with the compiled model's KV cache. This module is the host's side only: it reads the ELF
into the RAM image (`load_elf`, every field checked), watches each instruction the program
is about to execute (an instruction outside RV32IM, or a jump outside RAM, stops the run with
one line before the machine meets it), and reads the console text and exit code back from the
trace (firebrand's `events`: the write call's bytes, a0 at the exit call).

Errors are `MachineError`s of one line: a file that is not a little-endian 32-bit RISC-V
executable, a segment outside the file or beyond RAM, an entry point outside the image, RVC
(compressed) code, a program that outgrows the context before it halts.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from tw_lowering.machines import MachineError

DEFAULT_RAM = 8192
EM_RISCV = 243
ET_EXEC = 2
PT_LOAD = 1
EF_RISCV_RVC = 0x1
EF_RISCV_FLOAT_ABI = 0x6
HALT = -1

# Opcode -> the funct3 values RV32IM defines for it (None: every funct3).
_FUNCT3 = {
    0x03: {0, 1, 2, 4, 5},          # LOAD: lb lh lw lbu lhu
    0x0F: {0, 1},                   # MISC-MEM: fence, fence.i
    0x13: None,                     # OP-IMM (shifts checked below)
    0x17: None,                     # AUIPC
    0x23: {0, 1, 2},                # STORE: sb sh sw
    0x33: None,                     # OP (funct7 checked below)
    0x37: None,                     # LUI
    0x63: {0, 1, 4, 5, 6, 7},       # BRANCH
    0x67: {0},                      # JALR
    0x6F: None,                     # JAL
    0x73: {0},                      # SYSTEM: ecall (ebreak halts the machine)
}


def unsupported(word: int) -> str | None:
    """Why a 32-bit instruction word is outside RV32IM (None when it is an RV32IM one)."""
    if word & 3 != 3:
        return "a compressed (RVC) instruction"
    opcode, funct3, funct7 = word & 0x7F, word >> 12 & 7, word >> 25
    if opcode not in _FUNCT3:
        return f"opcode 0x{opcode:02x} (not RV32IM)"
    allowed = _FUNCT3[opcode]
    if allowed is not None and funct3 not in allowed:
        return f"opcode 0x{opcode:02x} with funct3 {funct3} (not RV32IM)"
    if opcode == 0x13 and funct3 in (1, 5) and funct7 not in ((0,) if funct3 == 1 else (0, 0x20)):
        return "a shift-immediate with a bad funct7"
    if opcode == 0x33 and funct7 not in (0, 1, 0x20):
        return f"OP with funct7 0x{funct7:02x} (not RV32IM)"
    if opcode == 0x33 and funct7 == 0x20 and funct3 not in (0, 5):
        return "OP with funct7 0x20 outside sub/sra"
    if opcode == 0x73 and word not in (0x73, 0x100073):
        return "a SYSTEM instruction other than ecall/ebreak (CSRs are not part of the machine)"
    return None


def load_elf(data: bytes, ram_bytes: int = DEFAULT_RAM) -> tuple[bytes, int]:
    """(RAM image from address 0 up to the last loaded byte, word aligned; entry point) of a
    little-endian RV32 executable ELF whose loadable segments all fit in [0, ram_bytes).
    Anything else is a one-line MachineError saying what is wrong."""
    data = bytes(data)

    def bad(why: str):
        raise MachineError(f"ELF: {why}")

    if len(data) < 52 or data[:4] != b"\x7fELF":
        bad("not an ELF file (no \\x7fELF header)")
    if data[4] != 1:
        bad("not a 32-bit ELF (EI_CLASS is not ELFCLASS32): compile with -march=rv32im "
            "-mabi=ilp32")
    if data[5] != 1:
        bad("not little-endian")
    (e_type, e_machine, _, e_entry, e_phoff, _, e_flags, _, e_phentsize,
     e_phnum) = struct.unpack_from("<HHIIIIIHHH", data, 16)
    if e_machine != EM_RISCV:
        bad(f"machine {e_machine}, not RISC-V ({EM_RISCV})")
    if e_type != ET_EXEC:
        bad(f"type {e_type}, not an executable (ET_EXEC): link it (see docs/machines.md)")
    if e_flags & EF_RISCV_RVC:
        bad("compressed (RVC) code: compile with -march=rv32im (no 'c')")
    if e_flags & EF_RISCV_FLOAT_ABI:
        bad("a hardware float ABI: compile with -mabi=ilp32")
    if e_phnum == 0:
        bad("no program headers")
    if e_phentsize < 32 or e_phoff + e_phnum * e_phentsize > len(data):
        bad(f"the program header table (offset {e_phoff}, {e_phnum} x {e_phentsize} bytes) "
            f"lies outside the {len(data)}-byte file")
    image = bytearray()
    loaded = False
    for i in range(e_phnum):
        p_type, p_offset, p_vaddr, _, p_filesz, p_memsz = struct.unpack_from(
            "<IIIIII", data, e_phoff + i * e_phentsize)
        if p_type != PT_LOAD or p_memsz == 0:
            continue
        if p_filesz > p_memsz:
            bad(f"segment {i}: file size {p_filesz} exceeds its memory size {p_memsz}")
        if p_offset + p_filesz > len(data):
            bad(f"segment {i}: bytes [{p_offset}, {p_offset + p_filesz}) lie outside the "
                f"{len(data)}-byte file (truncated?)")
        if p_vaddr + p_memsz > ram_bytes:
            bad(f"segment {i} at 0x{p_vaddr:x} ({p_memsz} bytes) does not fit {ram_bytes} "
                f"bytes of RAM (give more with --ram)")
        loaded = True
        end = p_vaddr + p_filesz
        if end > len(image):
            image.extend(bytes(end - len(image)))
        image[p_vaddr:end] = data[p_offset:p_offset + p_filesz]
    if not loaded:
        bad("no loadable segment")
    image.extend(bytes(-len(image) % 4))
    if e_entry % 4 or e_entry >= len(image):
        bad(f"entry point 0x{e_entry:x} is not an aligned address inside the loaded image "
            f"(0x0-0x{len(image):x})")
    return bytes(image), e_entry


@dataclass
class RV32Run:
    """What one program did: its console text, exit code (a0 at the exit call; None when it
    did not exit), instructions executed (records, division micro-steps not counted), tokens
    generated and their rate, and the whole token trace (prompt included)."""

    console: str
    exit_code: int | None
    halted: bool
    instructions: int
    tokens: int
    seconds: float
    trace: list[int] = field(repr=False)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class RV32:
    """firebrand's RV32IM machine (`RV32Spec(ram_bytes, max_context)`) compiled by tw: `run`
    an ELF. The compile happens on first use (`compiled`), then the model moves to `device`
    (e.g. "cuda"); `compile_options` go to `compile_machine` (d, d_head, ...)."""

    def __init__(self, ram_bytes: int = DEFAULT_RAM, max_context: int | None = None,
                 device: str | None = None, cache: bool = False, **compile_options):
        try:
            from firebrand.machines.rv32 import RV32Spec
        except ImportError:
            raise MachineError("the RV32 machine needs firebrand (pip install firebrand)") from None
        kw = {} if max_context is None else {"max_context": max_context}
        try:
            self.spec = RV32Spec(ram_bytes=ram_bytes, **kw)
        except ValueError as e:
            raise MachineError(f"RV32: {e}") from None
        self.ram_bytes = ram_bytes
        self.compile_options = compile_options
        self.device = device
        self.cache = cache
        self.loaded_from_cache = False
        self._compiled = None

    @property
    def max_context(self) -> int:
        return self.spec.max_context

    @property
    def prompt_length(self) -> int:
        return self.spec.protocol.prefix_length

    @property
    def compiled(self):
        """The `CompiledMachine` (compiled, or loaded from the cache, on first use)."""
        if self._compiled is None:
            self.compile()
        return self._compiled

    def compile(self, machine=None):
        """Compile now (or load the cached compile where `cache`), keep and return the
        `CompiledMachine`; `machine`: the spec's `machine()` when already built."""
        from tw_frontends.firebrand import compile_machine
        from tw_lowering.machines import CompiledMachine

        machine = self.spec.machine() if machine is None else machine
        ct = _load_cached(self.cache_path) if self.cache else None
        self.loaded_from_cache = ct is not None
        if ct is not None:
            cm = CompiledMachine(machine, ct, self.max_context, {"cache": 0.0})
        else:
            cm = compile_machine(machine, max_context=self.max_context, **self.compile_options)
            if self.cache:
                _store(self.cache_path, cm.compiled)
        if self.device is not None:
            cm.compiled.to(self.device)
        self._compiled = cm
        return cm

    @property
    def cache_path(self) -> Path:
        """Where `cache=True` keeps this compile: the cache folder (TW_CACHE_DIR, else
        $XDG_CACHE_HOME/tw, else ~/.cache/tw), rv32/, a name digesting the RAM, context and
        compile options, tw's version and the source of the compiler and firebrand (a
        changed compiler never loads an old model)."""
        import hashlib
        import json
        from importlib.metadata import version

        from twdialect import __version__

        h = hashlib.sha256(json.dumps(
            dict(ram=self.ram_bytes, context=self.max_context, tw=__version__,
                 firebrand=version("firebrand"), options=sorted(
                     (k, repr(v)) for k, v in self.compile_options.items())),
            sort_keys=True).encode())
        h.update(_source_digest())
        return _cache_root() / "rv32" / f"{h.hexdigest()[:32]}.pkl"

    def prompt(self, image: bytes, entry: int) -> list[int]:
        """The machine's first prompt: RAM, sentinel, registers, the resume record."""
        try:
            return [int(t) for t in self.spec.encode(image, entry)]
        except ValueError as e:
            raise MachineError(f"RV32: {e}") from None

    def run(self, elf: bytes, max_instructions: int | None = None,
            decoder: str = "auto") -> RV32Run:
        """Load `elf`, run it to its exit (or `max_instructions` records), and read its
        console and exit code back. `decoder`: "auto" (the index decoder where it applies),
        "index" or "torch" (`CompiledMachine.next_values`)."""
        image, entry = load_elf(elf, self.ram_bytes)
        prompt = self.prompt(image, entry)
        cm = self.compiled
        t0 = time.perf_counter()
        trace = list(_generate(cm, self, image, prompt, max_instructions, decoder))
        seconds = time.perf_counter() - t0
        return self.result(trace, image, len(prompt), seconds)

    def result(self, trace: list[int], image: bytes, prompt_length: int,
               seconds: float = 0.0) -> RV32Run:
        """An RV32Run read from a trace (any runner's: tw's, firebrand's)."""
        spec = self.spec
        halted = bool(spec.halted(trace))
        return RV32Run(
            console=spec.console(trace, image), halted=halted,
            exit_code=spec.registers(trace)[10] if halted else None,
            instructions=len(spec.records(trace)), tokens=len(trace) - prompt_length,
            seconds=seconds, trace=trace)


def _cache_root() -> Path:
    import os

    if os.environ.get("TW_CACHE_DIR"):
        return Path(os.environ["TW_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tw"


def _source_digest() -> bytes:
    """sha256 over the source of tw's compiler packages and firebrand's."""
    import hashlib
    import importlib

    h = hashlib.sha256()
    for name in ("twdialect", "tw_passes", "tw_lowering", "tw_frontends", "firebrand"):
        root = Path(importlib.import_module(name).__file__).parent
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.digest()


def _deep(fn):
    """fn() on a thread with a 512 MiB stack and a high recursion limit: a compiled model
    keeps its graph, whose op list pickle walks recursively (thousands of ops deep)."""
    import sys
    import threading

    out: dict = {}

    def work():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            out["error"] = e

    limit, size = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(limit, 1_000_000))
    threading.stack_size(1 << 29)
    try:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    finally:
        threading.stack_size(size)
        sys.setrecursionlimit(limit)
    if "error" in out:
        raise out["error"]
    return out["value"]


def _store(path: Path, ct) -> None:
    """The model pickled with its sha256 in front, written atomically (a cache is a
    convenience: a folder that cannot be written is skipped)."""
    import hashlib
    import os
    import pickle

    try:
        data = _deep(lambda: pickle.dumps(ct, protocol=pickle.HIGHEST_PROTOCOL))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(hashlib.sha256(data).digest() + data)
        tmp.replace(path)
    except (OSError, RecursionError, pickle.PicklingError):
        pass


def _load_cached(path: Path):
    """The cached model, or None where there is none, or it is damaged (its digest does not
    match: then it is compiled again and rewritten)."""
    import hashlib
    import pickle

    try:
        blob = path.read_bytes()
    except OSError:
        return None
    digest, data = blob[:32], blob[32:]
    if len(blob) < 33 or hashlib.sha256(data).digest() != digest:
        return None
    try:
        return _deep(lambda: pickle.loads(data))
    except Exception:  # noqa: BLE001 - any unpickling failure means: compile again
        return None


def _generate(cm, rv: RV32, image: bytes, prompt: list[int], max_instructions: int | None,
              decoder: str = "auto"):
    """The prompt and the machine's tokens, watching each instruction before it runs."""
    width = rv.spec.record.width
    limit = rv.max_context
    records = 0
    yield from prompt
    pc = _resume_pc(prompt, width)
    _check_pc(pc, image, rv.ram_bytes, len(prompt))
    n = len(prompt)
    record: list[int] = []
    for value in cm.next_values(prompt, limit, "RV32", decoder):
        yield value
        n += 1
        if value == HALT:
            return
        record.append(value)
        if len(record) == width:
            records += 1
            new_pc = record[0] | record[1] << 8 | record[2] << 16
            if new_pc != pc:  # (a division micro-step stays put)
                pc = new_pc
                _check_pc(pc, image, rv.ram_bytes, n)
            record = []
            if max_instructions is not None and records >= max_instructions:
                return
        if n >= limit:
            raise MachineError(f"RV32: the program ran out of context: {n} tokens "
                               f"({records} records) without halting, max_context {limit}; "
                               "give a larger max_context or fewer instructions")


def _resume_pc(prompt: list[int], width: int) -> int:
    last = prompt[-width:]
    return last[0] | last[1] << 8 | last[2] << 16


def _check_pc(pc_word: int, image: bytes, ram_bytes: int, position: int) -> None:
    """The instruction at word `pc_word` is in RAM and RV32IM (read from the loaded image: tw
    does not watch stores into code)."""
    address = 4 * pc_word
    if address >= ram_bytes:
        raise MachineError(f"RV32: the program jumped to 0x{address:x}, outside its "
                           f"{ram_bytes} bytes of RAM (at token {position})")
    word = int.from_bytes(image[address:address + 4].ljust(4, b"\0"), "little")
    why = unsupported(word)
    if why is not None:
        raise MachineError(f"RV32: unsupported instruction 0x{word:08x} at pc 0x{address:x}: "
                           f"{why}")


__all__ = ["RV32", "RV32Run", "load_elf", "unsupported", "DEFAULT_RAM"]
