"""tw's frontends, a floor above the dialect, the passes and the lowering: programs written in
other languages translated into tw graphs, and each language's driver that compiles them.

* `tw_frontends.rasp`: tracr's RASP (`translate`, and `compile_rasp_to_model`, tracr's own
  interface), the optional extra `tw-compiler[rasp]`;
* `tw_frontends.firebrand`: firebrand's machines (`translate`, `compile_machine`), the extra
  `tw-compiler[firebrand]`;
* `tw_frontends.torchwright`: torchwright graphs (`from_torchwright`), the extra
  `tw-compiler[torchwright]`.

Each imports its language's package only when used. Nothing below this floor imports it
(`tw_lowering.compile_rasp_to_model` and `tw_lowering.compile_machine` are names kept for
callers, resolved here on first use).
"""
