// tw.concat: a free view concatenating its operands (an operand may repeat).
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %a = tw.input "a" <-8.0, 8.0> : !tw.vec<1>
    %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
    %c = tw.concat(%a, %b, %a) : !tw.vec<1>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<4>
    tw.output "c" %c : !tw.vec<4>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %a = tw.input "a" <-8.0, 8.0> : !tw.vec<1>
// CHECK-NEXT: %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %c = tw.concat(%a, %b, %a) : !tw.vec<1>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<4>
// CHECK-NEXT: tw.output "c" %c : !tw.vec<4>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
