// tw.attn with a full (bidirectional) mask: `mask full` prints before the weights; the
// default causal mask is left out, and `mask causal` reads as the default.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP).
// RUN: TW_ROUNDTRIP
// RUN: tw-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

builtin.module {
  tw.graph @main {
    %q = tw.input "q" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %o = tw.attn %q, %q, %v mask full wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[1.0, -1.0]]> : tensor<1x2xf32> wo dense<[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]> : tensor<2x3xf32> {tw.annotation = "enc"} : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
    %c = tw.attn %q, %q, %v mask causal wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[1.0, -1.0]]> : tensor<1x2xf32> wo dense<[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]> : tensor<2x3xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
    tw.output "o" %o : !tw.vec<3>
    tw.output "c" %c : !tw.vec<3>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %q = tw.input "q" <-1.0, 1.0> : !tw.vec<2>
// CHECK-NEXT: %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
// CHECK-NEXT{LITERAL}: %o = tw.attn %q, %q, %v mask full wq dense<[[1.000000e+00], [0.000000e+00]]> : tensor<2x1xf32> wk dense<[[0.000000e+00], [1.000000e+00]]> : tensor<2x1xf32> wv dense<[[1.000000e+00, -1.000000e+00]]> : tensor<1x2xf32> wo dense<[[1.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 0.000000e+00]]> : tensor<2x3xf32> {tw.annotation = "enc"} : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
// CHECK-NEXT{LITERAL}: %c = tw.attn %q, %q, %v wq dense<[[1.000000e+00], [0.000000e+00]]> : tensor<2x1xf32> wk dense<[[0.000000e+00], [1.000000e+00]]> : tensor<2x1xf32> wv dense<[[1.000000e+00, -1.000000e+00]]> : tensor<1x2xf32> wo dense<[[1.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 0.000000e+00]]> : tensor<2x3xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
// CHECK-NEXT: tw.output "o" %o : !tw.vec<3>
// CHECK-NEXT: tw.output "c" %c : !tw.vec<3>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}

// The generic form holds the kind as a string property, before the weights.
// GENERIC{LITERAL}: %o = "tw.attn"(%q, %q, %v) <{mask = "full", wq = dense<[[1.000000e+00], [0.000000e+00]]> : tensor<2x1xf32>,
// GENERIC{LITERAL}: %c = "tw.attn"(%q, %q, %v) <{wq = dense<[[1.000000e+00], [0.000000e+00]]> : tensor<2x1xf32>,
