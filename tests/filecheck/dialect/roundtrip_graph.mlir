// tw.graph: a symbol holding one block of tw ops (no terminator).
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main attributes {tw.annotation = "top"} {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    tw.output "y" %x : !tw.vec<1>
  }
  tw.graph @empty {
  }
}

// CHECK-LABEL: builtin.module {
// CHECK-NEXT: tw.graph @main attributes {tw.annotation = "top"} {
// CHECK-NEXT: %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK-NEXT: tw.output "y" %x : !tw.vec<1>
// CHECK-NEXT: }
// CHECK-NEXT: tw.graph @empty {
// CHECK-NEXT: }
// CHECK-NEXT: {{^}$}}
