// RUN: tw-opt %s -p 'lower-to-transformer{d=6 d-head=2 d-hidden=4}' --verify-diagnostics | filecheck %s
// The attn needs 4 heads of a layer's 3, but d=8 (4 heads) is not enough either: x and the
// attn's result are 16 columns at once unless the attn refills x's columns, whose cancels
// need head dims beside its own 4 heads. A scan (tests/test_refusals.py) finds d=16 the
// smallest; the op's own need (8) is only a lower bound.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<8>
    %a = tw.attn %x, %x, %x wq dense<1.0> : tensor<8x2xf32> wk dense<1.0> : tensor<8x2xf32> wv dense<1.0> : tensor<8x8xf32> wo dense<1.0> : tensor<8x8xf32> : !tw.vec<8>, !tw.vec<8>, !tw.vec<8> -> !tw.vec<8>
    tw.output "a" %a : !tw.vec<8>
  }
}

// CHECK: 'tw.attn' %a in @main: needs 4 heads, a layer has 3; smallest d that fits (d_head=2, d_hidden=4): 16{{$}}
