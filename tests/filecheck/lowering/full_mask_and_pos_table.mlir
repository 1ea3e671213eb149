// RUN: tw-opt %s -p 'lower-to-transformer{d=16 d-head=4 d-hidden=2}' | filecheck %s
// A full-mask attn takes whole heads as a causal one does (the same cost), beside a causal
// attn and a position-local linear (pooled head work, in a causal head of the same layer:
// the MLP is too narrow for its bypass pair). A tw.pos_table is a source: columns of its own.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %p = tw.pos_table table dense<[[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [3.0, 0.0]]> : tensor<4x2xf32> : !tw.vec<2>
    %f = tw.attn %x, %p, %x mask full wq dense<1.0> : tensor<2x2xf32> wk dense<1.0> : tensor<2x2xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
    %c = tw.attn %x, %x, %p wq dense<1.0> : tensor<2x2xf32> wk dense<1.0> : tensor<2x2xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
    %l = tw.linear %x weight dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    tw.output "f" %f : !tw.vec<2>
    tw.output "c" %c : !tw.vec<2>
    tw.output "l" %l : !tw.vec<2>
  }
}

// CHECK:      tw.graph @main attributes {tw.n_layers = 1 : i64, tw.floor = 1 : i64,
// CHECK:      %p = tw.pos_table table
// CHECK-SAME: {tw.cols = array<i64: {{[0-9]+}}, {{[0-9]+}}>} : !tw.vec<2>
// CHECK:      %f = tw.attn %x, %p, %x mask full wq
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "attn", tw.heads = 1 : i64,
// CHECK:      %c = tw.attn %x, %x, %p wq
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "attn", tw.heads = 1 : i64,
// CHECK:      %l = tw.linear %x
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "attn", tw.dims = 2 : i64,
