// tw.piecewise_linear_2d: triangulated interpolation of a table on a grid.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <0.0, 1.0> : !tw.vec<1>
    %y = tw.input "y" <0.0, 1.0> : !tw.vec<1>
    %z = tw.piecewise_linear_2d %x, %y xs dense<[0.0, 1.0]> : tensor<2xf32> ys dense<[0.0, 0.5, 1.0]> : tensor<3xf32> table dense<[[[0.0], [0.5], [1.0]], [[1.0], [1.5], [2.0]]]> : tensor<2x3x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <0.0, 1.0> : !tw.vec<1>
// CHECK-NEXT: %y = tw.input "y" <0.0, 1.0> : !tw.vec<1>
// CHECK-NEXT{LITERAL}: %z = tw.piecewise_linear_2d %x, %y xs dense<[0.000000e+00, 1.000000e+00]> : tensor<2xf32> ys dense<[0.000000e+00, 5.000000e-01, 1.000000e+00]> : tensor<3xf32> table dense<[[[0.000000e+00], [5.000000e-01], [1.000000e+00]], [[1.000000e+00], [1.500000e+00], [2.000000e+00]]]> : tensor<2x3x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
// CHECK-NEXT: tw.output "z" %z : !tw.vec<1>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
