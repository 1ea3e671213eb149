// RUN: tw-opt %s -p 'lower-to-transformer{d=16 d-head=2 d-hidden=16}' --verify-diagnostics | filecheck %s

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<4>
    %a = tw.attn %x, %x, %x wq dense<1.0> : tensor<4x4xf32> wk dense<1.0> : tensor<4x4xf32> wv dense<1.0> : tensor<4x4xf32> wo dense<1.0> : tensor<4x4xf32> : !tw.vec<4>, !tw.vec<4>, !tw.vec<4> -> !tw.vec<4>
    tw.output "a" %a : !tw.vec<4>
  }
}

// CHECK: 'tw.attn' %a in @main: query/key width 4 exceeds d_head=2; smallest d_head that fits: 4
