// tw.attn: one causal attention head family with wq/wk/wv/wo.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %q = tw.input "q" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %o = tw.attn %q, %q, %v wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[1.0, -1.0]]> : tensor<1x2xf32> wo dense<[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]> : tensor<2x3xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
    tw.output "o" %o : !tw.vec<3>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %q = tw.input "q" <-1.0, 1.0> : !tw.vec<2>
// CHECK-NEXT: %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
// CHECK-NEXT{LITERAL}: %o = tw.attn %q, %q, %v wq dense<[[1.000000e+00], [0.000000e+00]]> : tensor<2x1xf32> wk dense<[[0.000000e+00], [1.000000e+00]]> : tensor<2x1xf32> wv dense<[[1.000000e+00, -1.000000e+00]]> : tensor<1x2xf32> wo dense<[[1.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 0.000000e+00]]> : tensor<2x3xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
// CHECK-NEXT: tw.output "o" %o : !tw.vec<3>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
