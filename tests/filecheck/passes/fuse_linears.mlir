// fuse-linears: affine chains compose; folds that would inflate parameters, cross a relu or a
// scope boundary, or duplicate a value for no depth gain do not happen.
// RUN: tw-opt %s --split-input-file -p fuse-linears | filecheck %s
// RUN: tw-opt %s --split-input-file -p 'fuse-linears{fanout=false}' | filecheck %s --check-prefix=NOFAN

// A chain of scalar affine ops (add_const, multiply_const, negate) collapses into one linear.
builtin.module {
  tw.graph @chain {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.linear %x weight dense<[[1.0]]> : tensor<1x1xf32> bias dense<[0.5]> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %b = tw.linear %a weight dense<[[3.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %c = tw.linear %b weight dense<[[-1.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "y" %c : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @chain
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %c = tw.linear %x weight dense<-3.000000e+00> : tensor<1x1xf32> bias dense<-1.500000e+00> : tensor<1xf32>
// CHECK-NEXT: tw.output "y" %c
// CHECK-NOT: tw.linear

// -----

// A linear feeding an mlp folds into its first matrix and b1; a linear reading an mlp folds
// into its second matrix and b2.
builtin.module {
  tw.graph @mlp {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.linear %x weight dense<[[1.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf32> bias dense<[1.0, 0.0]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    %m = tw.mlp %a w1 dense<[[1.0], [1.0]]> : tensor<2x1xf32> w2 dense<[[1.0, -1.0]]> : tensor<1x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %y = tw.linear %m weight dense<[[2.0], [0.0]]> : tensor<2x1xf32> bias dense<[0.25]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @mlp
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %y = tw.mlp %x w1 dense<{{\[\[}}1.000000e+00], [2.000000e+00]]> : tensor<2x1xf32> b1 dense<1.000000e+00> : tensor<1xf32> w2 dense<2.000000e+00> : tensor<1x1xf32> b2 dense<2.500000e-01> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: tw.output "y" %y

// -----

// A linear over a concat absorbs the linear feeding one concat operand (block rows A @ W_j).
builtin.module {
  tw.graph @concat {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<1>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<2>
    %lb = tw.linear %b weight dense<[[1.0], [2.0]]> : tensor<2x1xf32> bias dense<[1.0]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    %c = tw.concat(%a, %lb) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
    %y = tw.linear %c weight dense<[[1.0], [-1.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @concat
// CHECK: %[[C:.*]] = tw.concat(%a, %b) : !tw.vec<1>, !tw.vec<2> -> !tw.vec<3>
// CHECK-NEXT: %y = tw.linear %[[C]] weight dense<{{\[\[}}1.000000e+00], [-1.000000e+00], [-2.000000e+00]]> : tensor<3x1xf32> bias dense<-1.000000e+00> : tensor<1xf32>
// CHECK-NEXT: tw.output "y" %y
// CHECK-NOT: tw.linear %b

// -----

// A bottleneck (4 -> 1 -> 4: 8 parameters) would become a 4x4 matrix (16): not fused.
builtin.module {
  tw.graph @bottleneck {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<4>
    %s = tw.linear %x weight dense<[[1.0], [1.0], [1.0], [1.0]]> : tensor<4x1xf32> : !tw.vec<4> -> !tw.vec<1>
    %y = tw.linear %s weight dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32> : !tw.vec<1> -> !tw.vec<4>
    tw.output "y" %y : !tw.vec<4>
  }
}
// CHECK-LABEL: tw.graph @bottleneck
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %s = tw.linear %x
// CHECK-NEXT: %y = tw.linear %s
// CHECK-NEXT: tw.output "y" %y

// -----

// A relu between two linears: nothing to compose.
builtin.module {
  tw.graph @relu {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.linear %x weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %r = tw.relu %a : !tw.vec<1>
    %y = tw.linear %r weight dense<[[3.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @relu
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %a = tw.linear %x
// CHECK-NEXT: %r = tw.relu %a
// CHECK-NEXT: %y = tw.linear %r
// CHECK-NEXT: tw.output "y" %y

// -----

// A multi-use intermediate: the single-use folds leave it alone; fanout duplicates the small
// linear into the reader whose slot drops (the output keeps the original). With fanout=false
// nothing changes.
builtin.module {
  tw.graph @fanout {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.linear %x weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %y = tw.linear %a weight dense<[[3.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "a" %a : !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @fanout
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %a = tw.linear %x weight dense<2.000000e+00>
// CHECK-NEXT: %y = tw.linear %x weight dense<6.000000e+00>
// CHECK-NEXT: tw.output "a" %a
// CHECK-NEXT: tw.output "y" %y
// NOFAN-LABEL: tw.graph @fanout
// NOFAN-NEXT: %x = tw.input "x"
// NOFAN-NEXT: %a = tw.linear %x weight dense<2.000000e+00>
// NOFAN-NEXT: %y = tw.linear %a weight dense<3.000000e+00>

// -----

// Two linears in different sequential-scope iterations keep the iteration boundary; the
// annotation of the consumer is carried onto a fused op.
builtin.module {
  tw.graph @scopes {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.linear %x weight dense<[[2.0]]> : tensor<1x1xf32> {tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<1> -> !tw.vec<1>
    %b = tw.linear %a weight dense<[[3.0]]> : tensor<1x1xf32> {tw.scope = "loop", tw.iteration = 1 : i64} : !tw.vec<1> -> !tw.vec<1>
    %c = tw.linear %b weight dense<[[5.0]]> : tensor<1x1xf32> {tw.annotation = "tail", tw.scope = "loop", tw.iteration = 1 : i64} : !tw.vec<1> -> !tw.vec<1>
    tw.output "y" %c : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @scopes
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %a = tw.linear %x weight dense<2.000000e+00>
// CHECK-NEXT: %c = tw.linear %a weight dense<1.500000e+01> : tensor<1x1xf32> {tw.annotation = "tail", tw.scope = "loop", tw.iteration = 1 : i64}
// CHECK-NEXT: tw.output "y" %c

// -----

// Linears feeding an attention head fold into wq/wk/wv; a key bias is dropped (it shifts all
// of a query's logits equally); a value bias has nowhere to go, so that linear stays.
builtin.module {
  tw.graph @attn {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %q = tw.linear %x weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %k = tw.linear %x weight dense<[[3.0]]> : tensor<1x1xf32> bias dense<[5.0]> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %v = tw.linear %x weight dense<[[4.0]]> : tensor<1x1xf32> bias dense<[1.0]> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %o = tw.attn %q, %k, %v wq dense<[[1.0]]> : tensor<1x1xf32> wk dense<[[1.0]]> : tensor<1x1xf32> wv dense<[[1.0]]> : tensor<1x1xf32> wo dense<[[1.0]]> : tensor<1x1xf32> : !tw.vec<1>, !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    tw.output "o" %o : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @attn
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %v = tw.linear %x weight dense<4.000000e+00> : tensor<1x1xf32> bias dense<1.000000e+00>
// CHECK-NEXT: %o = tw.attn %x, %x, %v wq dense<2.000000e+00> : tensor<1x1xf32> wk dense<3.000000e+00> : tensor<1x1xf32> wv dense<1.000000e+00>
// CHECK-NEXT: tw.output "o" %o
