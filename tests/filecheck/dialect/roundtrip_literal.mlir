// tw.literal: a constant row; a splat dense<1.0> round-trips.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %c = tw.literal dense<[1.0, -2.5]> : tensor<2xf32> : !tw.vec<2>
    %one = tw.literal dense<1.0> : tensor<3xf32> : !tw.vec<3>
    tw.output "c" %c : !tw.vec<2>
    tw.output "one" %one : !tw.vec<3>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %c = tw.literal dense<[1.000000e+00, -2.500000e+00]> : tensor<2xf32> : !tw.vec<2>
// CHECK-NEXT: %one = tw.literal dense<1.000000e+00> : tensor<3xf32> : !tw.vec<3>
// CHECK-NEXT: tw.output "c" %c : !tw.vec<2>
// CHECK-NEXT: tw.output "one" %one : !tw.vec<3>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
