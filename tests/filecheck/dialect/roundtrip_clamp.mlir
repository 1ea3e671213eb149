// tw.clamp: elementwise min(max(x, lo), hi).
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %y = tw.clamp %x, -1.0, 2.5 : !tw.vec<2>
    tw.output "y" %y : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %y = tw.clamp %x, -1.000000e+00, 2.500000e+00 : !tw.vec<2>
// CHECK-NEXT: tw.output "y" %y : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
