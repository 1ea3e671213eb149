// tw.after: x itself, ordered after every dependency.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %t = tw.input "t" <-8.0, 8.0> : !tw.vec<1>
    %r = tw.relu %t : !tw.vec<1>
    %y = tw.after %x, (%t, %r) : !tw.vec<2>, !tw.vec<1>, !tw.vec<1>
    tw.output "y" %y : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %t = tw.input "t" <-8.0, 8.0> : !tw.vec<1>
// CHECK-NEXT: %r = tw.relu %t : !tw.vec<1>
// CHECK-NEXT: %y = tw.after %x, (%t, %r) : !tw.vec<2>, !tw.vec<1>, !tw.vec<1>
// CHECK-NEXT: tw.output "y" %y : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
