// tw.relu: elementwise max(x, 0).
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %r = tw.relu %x : !tw.vec<2>
    tw.output "r" %r : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %r = tw.relu %x : !tw.vec<2>
// CHECK-NEXT: tw.output "r" %r : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
