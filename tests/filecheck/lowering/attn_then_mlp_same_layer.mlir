// RUN: tw-opt %s -p 'lower-to-transformer{d=16 d-head=4 d-hidden=16}' | filecheck %s
// An attn op and the MLP chain reading it share one layer (attention -> MLP handoff).

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %p = tw.pos_encoding max_len 16 : !tw.vec<2>
    %q = tw.concat(%p, %x) : !tw.vec<2>, !tw.vec<2> -> !tw.vec<4>
    %a = tw.attn %q, %q, %x wq dense<1.0> : tensor<4x2xf32> wk dense<1.0> : tensor<4x2xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<4>, !tw.vec<4>, !tw.vec<2> -> !tw.vec<2>
    %m = tw.mlp %a w1 dense<1.0> : tensor<2x3xf32> w2 dense<1.0> : tensor<3x1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "m" %m : !tw.vec<1>
  }
}

// CHECK:      tw.graph @main attributes {tw.n_layers = 1 : i64, tw.floor = 1 : i64, tw.geometry = "d=16 d_head=4 d_hidden=16"}
// CHECK:      %x = tw.input "x" <-1.0, 1.0> {tw.cols = array<i64: 2, 3>}
// CHECK:      %p = tw.pos_encoding max_len 16 {tw.cols = array<i64: 4>}
// CHECK:      %a = tw.attn
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "attn", tw.heads = 1 : i64, tw.cols = array<i64: 5, 6>}
// CHECK:      %m = tw.mlp %a
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "mlp", tw.neurons = 3 : i64, tw.cols = array<i64: 7>}
