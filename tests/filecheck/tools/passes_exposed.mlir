// tw-opt exposes tw's passes and the upstream passes that keep tw IR (cse, dce, canonicalize);
// the other upstream passes rewrite other dialects and are not offered (some wrote IR tw-opt
// could not read back; tests/test_cli_contract.py checks that they are refused). Each output
// is read back by a second tw-opt.
// RUN: tw-opt %s -p cse,dce | tw-opt | filecheck %s
// RUN: tw-opt %s -p cse,dce,canonicalize | tw-opt | filecheck %s --check-prefix=CANON

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.relu %x : !tw.vec<2>
    %b = tw.relu %x : !tw.vec<2>
    %s = tw.add %a, %b : !tw.vec<2>
    tw.output "y" %s : !tw.vec<2>
  }
}

// CHECK:      %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK-NEXT: %a = tw.relu %x : !tw.vec<2>
// CHECK-NEXT: %s = tw.add %a, %a : !tw.vec<2>

// CANON:      %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CANON-NEXT: %s = tw.mlp %x w1
// CANON-NEXT: tw.output "y" %s : !tw.vec<2>
