// RUN: tw-opt %s -p 'lower-to-transformer{d=16 d-head=4 d-hidden=2}' | filecheck %s
// RUN: tw-opt %s -p 'lower-to-transformer{d=16 d-head=2 d-hidden=2}' --verify-diagnostics | filecheck %s --check-prefix=NARROW
// A rotary attn takes whole heads as a plain one does (the same cost; its q/k at head dims
// 0..d_qk-1, so the rotation planes lie inside each head), beside a plain causal attn and a
// position-local linear (pooled head work, in an unrotated causal head of the same layer: the
// MLP is too narrow for its bypass pair). Its q/k width must fit a head.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %r = tw.attn %x, %x, %x rope base 10000.0 dims 4 wq dense<1.0> : tensor<2x4xf32> wk dense<1.0> : tensor<2x4xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
    %c = tw.attn %x, %x, %x wq dense<1.0> : tensor<2x2xf32> wk dense<1.0> : tensor<2x2xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
    %l = tw.linear %x weight dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    tw.output "r" %r : !tw.vec<2>
    tw.output "c" %c : !tw.vec<2>
    tw.output "l" %l : !tw.vec<2>
  }
}

// CHECK:      tw.graph @main attributes {tw.n_layers = 1 : i64, tw.floor = 1 : i64,
// CHECK:      %r = tw.attn %x, %x, %x rope base 1.000000e+04 dims 4 wq
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "attn", tw.heads = 1 : i64,
// CHECK:      %c = tw.attn %x, %x, %x wq
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "attn", tw.heads = 1 : i64,
// CHECK:      %l = tw.linear %x
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "attn", tw.dims = 2 : i64,

// NARROW: query/key width 4 exceeds d_head=2
