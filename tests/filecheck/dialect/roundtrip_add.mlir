// tw.add: elementwise sum of equally wide values.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %a = tw.input "a" <-8.0, 8.0> : !tw.vec<2>
    %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
    %s = tw.add %a, %b : !tw.vec<2>
    tw.output "s" %s : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %a = tw.input "a" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %s = tw.add %a, %b : !tw.vec<2>
// CHECK-NEXT: tw.output "s" %s : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
