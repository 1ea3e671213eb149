// tw.piecewise_linear: 1-D interpolation through (breakpoints, values rows).
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-4.0, 4.0> : !tw.vec<1>
    %sq = tw.piecewise_linear %x breakpoints dense<[-2.0, 0.0, 2.0]> : tensor<3xf32> values dense<[[4.0, -2.0], [0.0, 0.0], [4.0, 2.0]]> : tensor<3x2xf32> : !tw.vec<1> -> !tw.vec<2>
    tw.output "sq" %sq : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-4.0, 4.0> : !tw.vec<1>
// CHECK-NEXT{LITERAL}: %sq = tw.piecewise_linear %x breakpoints dense<[-2.000000e+00, 0.000000e+00, 2.000000e+00]> : tensor<3xf32> values dense<[[4.000000e+00, -2.000000e+00], [0.000000e+00, 0.000000e+00], [4.000000e+00, 2.000000e+00]]> : tensor<3x2xf32> : !tw.vec<1> -> !tw.vec<2>
// CHECK-NEXT: tw.output "sq" %sq : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
