// tw.output: a named graph output; one value may feed several outputs.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <0.0, 1.0> : !tw.vec<3>
    tw.output "first" %x : !tw.vec<3>
    tw.output "again" %x : !tw.vec<3>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <0.0, 1.0> : !tw.vec<3>
// CHECK-NEXT: tw.output "first" %x : !tw.vec<3>
// CHECK-NEXT: tw.output "again" %x : !tw.vec<3>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
