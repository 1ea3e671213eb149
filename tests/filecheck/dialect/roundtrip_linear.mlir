// tw.linear: y = x @ W (+ b); the bias group is optional.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %y = tw.linear %x weight dense<[[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]]> : tensor<2x3xf32> : !tw.vec<2> -> !tw.vec<3>
    %z = tw.linear %y weight dense<[[1.0], [1.0], [1.0]]> : tensor<3x1xf32> bias dense<0.5> : tensor<1xf32> : !tw.vec<3> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT{LITERAL}: %y = tw.linear %x weight dense<[[1.000000e+00, 0.000000e+00, 2.000000e+00], [0.000000e+00, 1.000000e+00, -1.000000e+00]]> : tensor<2x3xf32> : !tw.vec<2> -> !tw.vec<3>
// CHECK-NEXT: %z = tw.linear %y weight dense<1.000000e+00> : tensor<3x1xf32> bias dense<5.000000e-01> : tensor<1xf32> : !tw.vec<3> -> !tw.vec<1>
// CHECK-NEXT: tw.output "z" %z : !tw.vec<1>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
