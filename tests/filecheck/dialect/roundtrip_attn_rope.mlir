// tw.attn with rotary position embeddings: `rope base B dims R` prints after the mask (if
// any) and before the weights; an attn without it rotates nothing and prints as before.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP).
// RUN: TW_ROUNDTRIP
// RUN: tw-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

builtin.module {
  tw.graph @main {
    %q = tw.input "q" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %r = tw.attn %q, %q, %v rope base 500000.0 dims 2 wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<[[1.0, -1.0]]> : tensor<1x2xf32> wo dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> {tw.annotation = "rot"} : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<2>
    %f = tw.attn %q, %q, %v mask full rope base 10000.0 dims 2 wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<[[1.0, -1.0]]> : tensor<1x2xf32> wo dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<2>
    %p = tw.attn %q, %q, %v wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<[[1.0, -1.0]]> : tensor<1x2xf32> wo dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<2>
    tw.output "r" %r : !tw.vec<2>
    tw.output "f" %f : !tw.vec<2>
    tw.output "p" %p : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %q = tw.input "q" <-1.0, 1.0> : !tw.vec<2>
// CHECK-NEXT: %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
// CHECK-NEXT{LITERAL}: %r = tw.attn %q, %q, %v rope base 5.000000e+05 dims 2 wq dense<[[1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32> wk
// CHECK-SAME: {tw.annotation = "rot"} : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<2>
// CHECK-NEXT{LITERAL}: %f = tw.attn %q, %q, %v mask full rope base 1.000000e+04 dims 2 wq dense<[[1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32> wk
// CHECK-NEXT{LITERAL}: %p = tw.attn %q, %q, %v wq dense<[[1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32> wk
// CHECK-NEXT: tw.output "r" %r : !tw.vec<2>
// CHECK-NEXT: tw.output "f" %f : !tw.vec<2>
// CHECK-NEXT: tw.output "p" %p : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}

// The generic form holds the base (f64) and dims (i64) as properties before the weights.
// GENERIC{LITERAL}: %r = "tw.attn"(%q, %q, %v) <{rope_base = 5.000000e+05 : f64, rope_dims = 2 : i64, wq = dense<[[1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32>,
// GENERIC{LITERAL}: %f = "tw.attn"(%q, %q, %v) <{mask = "full", rope_base = 1.000000e+04 : f64, rope_dims = 2 : i64, wq =
// GENERIC{LITERAL}: %p = "tw.attn"(%q, %q, %v) <{wq = dense<[[1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32>,
