// tw.mlp: relu(x W1 + b1) W2 + b2; b1 and b2 are optional and independent.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %full = tw.mlp %x w1 dense<[[1.0, -1.0, 0.0], [0.0, 1.0, 1.0]]> : tensor<2x3xf32> b1 dense<[0.0, 1.0, -1.0]> : tensor<3xf32> w2 dense<[[1.0], [2.0], [3.0]]> : tensor<3x1xf32> b2 dense<0.25> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    %bare = tw.mlp %x w1 dense<[[1.0], [1.0]]> : tensor<2x1xf32> w2 dense<[[2.0, 3.0]]> : tensor<1x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %no_b1 = tw.mlp %x w1 dense<[[1.0], [1.0]]> : tensor<2x1xf32> w2 dense<[[2.0]]> : tensor<1x1xf32> b2 dense<1.0> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "full" %full : !tw.vec<1>
    tw.output "bare" %bare : !tw.vec<2>
    tw.output "no_b1" %no_b1 : !tw.vec<1>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT{LITERAL}: %full = tw.mlp %x w1 dense<[[1.000000e+00, -1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 1.000000e+00]]> : tensor<2x3xf32> b1 dense<[0.000000e+00, 1.000000e+00, -1.000000e+00]> : tensor<3xf32> w2 dense<[[1.000000e+00], [2.000000e+00], [3.000000e+00]]> : tensor<3x1xf32> b2 dense<2.500000e-01> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT{LITERAL}: %bare = tw.mlp %x w1 dense<1.000000e+00> : tensor<2x1xf32> w2 dense<[[2.000000e+00, 3.000000e+00]]> : tensor<1x2xf32> : !tw.vec<2> -> !tw.vec<2>
// CHECK-NEXT: %no_b1 = tw.mlp %x w1 dense<1.000000e+00> : tensor<2x1xf32> w2 dense<2.000000e+00> : tensor<1x1xf32> b2 dense<1.000000e+00> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: tw.output "full" %full : !tw.vec<1>
// CHECK-NEXT: tw.output "bare" %bare : !tw.vec<2>
// CHECK-NEXT: tw.output "no_b1" %no_b1 : !tw.vec<1>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
