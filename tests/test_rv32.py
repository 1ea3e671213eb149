"""The RV32 machine on tw: ELF loading (damaged files get one line), the RV32IM instruction
check, and a C program run end to end, token for token equal to firebrand's own model.

The program is built with riscv64-unknown-elf-gcc when it is present (CI installs it), else
the stored examples/rv32/hello.elf (the same program, built for 1024 bytes of RAM)."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest

from tw_lowering.machines import MachineError
from tw_frontends.firebrand.rv32 import RV32, load_elf, unsupported

pytest.importorskip("firebrand")

RAM = 1024
CONTEXT = 2048
STORED = Path(__file__).resolve().parent.parent / "examples" / "rv32" / "hello.elf"


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> bytes:
    from tw_examples.rv32 import build, have_gcc

    if not have_gcc():
        return STORED.read_bytes()
    return build("hello", tmp_path_factory.mktemp("rv32") / "hello.elf", RAM)


@pytest.fixture(scope="module")
def rv() -> RV32:
    return RV32(ram_bytes=RAM, max_context=CONTEXT)


def test_stored_elf_is_current():
    """The stored ELF is what the bundled sources build (when the compiler is here)."""
    from tw_examples.rv32 import build, have_gcc

    if not have_gcc():
        pytest.skip("riscv64-unknown-elf-gcc not installed")
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "hello.elf"
        build("hello", out, RAM)
        subprocess.run(["riscv64-unknown-elf-strip", str(out)], check=True)
        assert load_elf(out.read_bytes(), RAM) == load_elf(STORED.read_bytes(), RAM)


def test_hello_runs_exactly_as_firebrand(rv, hello):
    import firebrand

    run = rv.run(hello)
    assert run.console == "hi\n" and run.exit_code == 7 and run.halted
    assert run.instructions > 20 and run.tokens == len(run.trace) - rv.prompt_length
    image, entry = load_elf(hello, RAM)
    ref = firebrand.compile_machine(rv.spec.machine()).generate(
        rv.prompt(image, entry), max_steps=CONTEXT - rv.prompt_length)
    assert [int(t) for t in ref] == run.trace
    stats = rv.compiled.stats
    assert stats.layers <= 49 and stats.residual <= 4586 // 2


def test_cli_runs_an_elf_and_caches_the_compile(tmp_path, hello, capsys, monkeypatch):
    """The first run compiles and stores the model; the second loads it; a damaged cache file
    is compiled again (and rewritten)."""
    from tw_tools.tw_machine import main

    monkeypatch.setenv("TW_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "hello.elf"
    path.write_bytes(hello)
    argv = ["rv32", str(path), "--ram", str(RAM), "--max-context", str(CONTEXT), "--json"]
    runs = []
    for damage in (False, False, True):
        if damage:
            (cached,) = (tmp_path / "cache" / "rv32").glob("*.pkl")
            blob = bytearray(cached.read_bytes())
            blob[len(blob) // 2] ^= 0xFF
            cached.write_bytes(bytes(blob))
        assert main(argv) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert [r["cached"] for r in runs] == [False, True, False]
    for out in runs:
        assert out["console"] == "hi\n" and out["exit_code"] == 7 and out["halted"]
        assert out["layers"] <= 49 and out["instructions"] > 20
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "hi" and text[1].startswith("# exit 7; ") \
        and "loaded the cached compile" in text[1]
    # the index decoder by default; the torch decoder on request, with the same run
    from tw_lowering.fast_decode import available

    assert runs[0]["decoder"] == ("index" if available() is None else
                                  f"torch ({available()})")
    assert main(argv + ["--decoder", "torch"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert slow["decoder"] == "torch"
    assert {k: slow[k] for k in ("console", "exit_code", "instructions", "tokens")} == \
        {k: runs[0][k] for k in ("console", "exit_code", "instructions", "tokens")}


def _patched(elf: bytes, offset: int, data: bytes) -> bytes:
    return elf[:offset] + data + elf[offset + len(data):]


def _phdr(elf: bytes, i: int = 0) -> int:
    phoff, = struct.unpack_from("<I", elf, 28)
    phentsize, = struct.unpack_from("<H", elf, 42)
    return phoff + i * phentsize


@pytest.mark.parametrize("damage,says", [
    (lambda e: b"", "not an ELF file"),
    (lambda e: e[:40], "not an ELF file"),
    (lambda e: b"\x7fELF" + bytes(60), "not a 32-bit ELF"),
    (lambda e: _patched(e, 4, b"\x02"), "not a 32-bit ELF"),
    (lambda e: _patched(e, 5, b"\x02"), "not little-endian"),
    (lambda e: _patched(e, 18, struct.pack("<H", 62)), "machine 62, not RISC-V"),
    (lambda e: _patched(e, 16, struct.pack("<H", 3)), "not an executable"),
    (lambda e: _patched(e, 36, struct.pack("<I", 1)), r"compressed \(RVC\) code"),
    (lambda e: _patched(e, 36, struct.pack("<I", 4)), "hardware float ABI"),
    (lambda e: _patched(e, 28, struct.pack("<I", 1 << 30)), "program header table"),
    (lambda e: _patched(e, 44, struct.pack("<H", 0)), "no program headers"),
    (lambda e: _patched(e, 24, struct.pack("<I", 2)), "entry point 0x2"),
    (lambda e: _patched(e, 24, struct.pack("<I", 4096)), "entry point 0x1000"),
    (lambda e: e[:struct.unpack_from("<I", e, _phdr(e) + 4)[0] + 16], "truncated"),
])
def test_damaged_elf_is_one_line(hello, damage, says):
    with pytest.raises(MachineError, match=says) as info:
        load_elf(damage(hello), RAM)
    assert "\n" not in str(info.value) and str(info.value).startswith("ELF: ")


def test_segment_beyond_ram_is_named(hello):
    with pytest.raises(MachineError, match=r"does not fit 256 bytes of RAM \(give more with --ram\)"):
        load_elf(hello, 256)
    ph = _phdr(hello)
    big = _patched(hello, ph + 20, struct.pack("<I", 1 << 20))  # p_memsz
    with pytest.raises(MachineError, match="does not fit"):
        load_elf(big, RAM)


def test_random_damage_never_escapes_as_another_error(hello):
    rng = random.Random("elf-fuzz")
    for _ in range(400):
        data = bytearray(hello)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(min(len(data), 128) if rng.random() < 0.7 else len(data))
            data[i] = rng.randrange(256)
        if rng.random() < 0.2:
            data = data[:rng.randrange(len(data))]
        try:
            image, entry = load_elf(bytes(data), RAM)
        except MachineError as e:
            assert "\n" not in str(e)
        else:
            assert len(image) <= RAM and entry % 4 == 0 and entry < len(image)


@pytest.mark.parametrize("word,ok", [
    (0x00000013, True),    # addi x0, x0, 0
    (0x02B50533, True),    # mul a0, a0, a1
    (0x40B50533, True),    # sub
    (0x00000073, True),    # ecall
    (0x0000100F, True),    # fence.i
    (0x00000000, False),   # all zero: a compressed encoding
    (0x30529073, False),   # csrrw (Zicsr)
    (0x00B52053, False),   # fadd.s (F)
    (0x00B5202F, False),   # amoadd.w (A)
    (0x0005B003, False),   # ld (RV64)
    (0x0000106F & ~0, True),
])
def test_instruction_check(word, ok):
    assert (unsupported(word) is None) is ok


def test_unsupported_instruction_stops_the_run_in_one_line(rv, hello):
    # a CSR write at the entry point (address 0)
    with pytest.raises(MachineError, match=r"unsupported instruction 0x30529073 at pc 0x0"):
        rv.run(_at_entry(hello, [0x30529073]))


def _at_entry(hello: bytes, words: list[int]) -> bytes:
    """hello with `words` written over its first instructions (at the entry point)."""
    image, entry = load_elf(hello, RAM)
    ph = _phdr(hello)
    p_offset, p_vaddr = struct.unpack_from("<II", hello, ph + 4)
    at = p_offset + entry - p_vaddr
    return _patched(hello, at, b"".join(struct.pack("<I", w) for w in words))


def test_a_program_that_never_exits_runs_out_of_context_in_one_line(rv, hello):
    with pytest.raises(MachineError, match=r"ran out of context: 2048 tokens .* without halting"):
        rv.run(_at_entry(hello, [0x0000006F]))  # j . (jal x0, 0)


def test_max_instructions_stops_a_run(rv, hello):
    run = rv.run(_at_entry(hello, [0x0000006F]), max_instructions=5)
    assert run.instructions == 5 and not run.halted and run.exit_code is None
    assert run.tokens == 5 * rv.spec.record.width


def test_a_jump_outside_ram_is_named(rv, hello):
    # lui t0, 0x1; jalr x0, 0(t0): to address 0x1000, beyond 1024 bytes of RAM
    with pytest.raises(MachineError, match=r"jumped to 0x1000, outside its 1024 bytes of RAM"):
        rv.run(_at_entry(hello, [0x000012B7, 0x00028067]))
