// tw.mlp activations and gates: `act swish` prints after the operand, `up` / `ub` (the up
// projection of a gated mlp and its bias) between b1 and w2; the default relu is left out,
// and `act relu` reads as the default.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP).
// RUN: TW_ROUNDTRIP
// RUN: tw-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %s = tw.mlp %x act swish w1 dense<[[1.0, -1.0], [0.5, 2.0]]> : tensor<2x2xf32> b1 dense<[0.5, 0.0]> : tensor<2xf32> w2 dense<[[1.0], [-1.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    %g = tw.mlp %x act swish w1 dense<[[1.0, -1.0], [0.5, 2.0]]> : tensor<2x2xf32> up dense<[[2.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> ub dense<[1.0, -1.0]> : tensor<2xf32> w2 dense<[[1.0], [-1.0]]> : tensor<2x1xf32> b2 dense<0.25> : tensor<1xf32> {tw.annotation = "ffn"} : !tw.vec<2> -> !tw.vec<1>
    %r = tw.mlp %x act relu w1 dense<[[1.0, -1.0], [0.5, 2.0]]> : tensor<2x2xf32> b1 dense<[0.5, 0.0]> : tensor<2xf32> up dense<[[2.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> w2 dense<[[1.0], [-1.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "s" %s : !tw.vec<1>
    tw.output "g" %g : !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK-NEXT{LITERAL}: %s = tw.mlp %x act swish w1 dense<[[1.000000e+00, -1.000000e+00], [5.000000e-01, 2.000000e+00]]> : tensor<2x2xf32> b1 dense<[5.000000e-01, 0.000000e+00]> : tensor<2xf32> w2 dense<[[1.000000e+00], [-1.000000e+00]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT{LITERAL}: %g = tw.mlp %x act swish w1 dense<[[1.000000e+00, -1.000000e+00], [5.000000e-01, 2.000000e+00]]> : tensor<2x2xf32> up dense<[[2.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32> ub dense<[1.000000e+00, -1.000000e+00]> : tensor<2xf32> w2 dense<[[1.000000e+00], [-1.000000e+00]]> : tensor<2x1xf32> b2 dense<2.500000e-01> : tensor<1xf32> {tw.annotation = "ffn"} : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT{LITERAL}: %r = tw.mlp %x w1 dense<[[1.000000e+00, -1.000000e+00], [5.000000e-01, 2.000000e+00]]> : tensor<2x2xf32> b1 dense<[5.000000e-01, 0.000000e+00]> : tensor<2xf32> up dense<[[2.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32> w2 dense<[[1.000000e+00], [-1.000000e+00]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: tw.output "s" %s : !tw.vec<1>
// CHECK-NEXT: tw.output "g" %g : !tw.vec<1>
// CHECK-NEXT: tw.output "r" %r : !tw.vec<1>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}

// The generic form holds the activation as a string property before w1, the up projection
// and its bias as `up` and `ub`.
// GENERIC{LITERAL}: %s = "tw.mlp"(%x) <{act = "swish", w1 =
// GENERIC{LITERAL}: %g = "tw.mlp"(%x) <{act = "swish", w1 = dense<[[1.000000e+00, -1.000000e+00], [5.000000e-01, 2.000000e+00]]> : tensor<2x2xf32>, up = dense<[[2.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32>, ub = dense<[1.000000e+00, -1.000000e+00]> : tensor<2xf32>,
// GENERIC{LITERAL}: %r = "tw.mlp"(%x) <{w1 =
