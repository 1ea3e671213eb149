// tw.slice: components [start, start + width) of its operand, a free view.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<8>
    %s = tw.slice %x[2] : !tw.vec<8> -> !tw.vec<3>
    %t = tw.slice %x[7] : !tw.vec<8> -> !tw.vec<1>
    tw.output "s" %s : !tw.vec<3>
    tw.output "t" %t : !tw.vec<1>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> : !tw.vec<8>
// CHECK-NEXT: %s = tw.slice %x[2] : !tw.vec<8> -> !tw.vec<3>
// CHECK-NEXT: %t = tw.slice %x[7] : !tw.vec<8> -> !tw.vec<1>
// CHECK-NEXT: tw.output "s" %s : !tw.vec<3>
// CHECK-NEXT: tw.output "t" %t : !tw.vec<1>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
