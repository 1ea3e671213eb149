// tw.compare: +1 where x >= threshold else -1, with a positive ramp.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %b = tw.compare %x, 0.5 ramp 0.125 : !tw.vec<2>
    tw.output "b" %b : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %b = tw.compare %x, 5.000000e-01 ramp 1.250000e-01 : !tw.vec<2>
// CHECK-NEXT: tw.output "b" %b : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
