// RUN: tw-opt %s -p 'lower-to-transformer{d=8 d-head=2 d-hidden=64}' --verify-diagnostics | filecheck %s
// Dead columns block, and no d_hidden helps: %x reaches 1000, %a stays below 1, so a cancel of
// %x in the sublayer that writes %a would cost %a its low bits (SAME_SUBLAYER_RATIO); %a needs
// new columns beside %x's dead ones. A scan (tests/test_refusals.py) finds d=10 the smallest.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1000.0, 1000.0> : !tw.vec<4>
    %a = tw.mlp %x w1 dense<0.001> : tensor<4x4xf32> w2 dense<0.001> : tensor<4x4xf32> : !tw.vec<4> -> !tw.vec<4>
    %b = tw.mlp %a w1 dense<1.0> : tensor<4x4xf32> w2 dense<1.0> : tensor<4x4xf32> : !tw.vec<4> -> !tw.vec<4>
    tw.output "y" %b : !tw.vec<4>
  }
}

// CHECK:      residual width binds at d=8
// CHECK-SAME: smallest d that fits (d_head=2, d_hidden=64): 10;
// CHECK-NOT:  smallest d_hidden
// CHECK-SAME: dead columns block, not live values
// CHECK-SAME: ('tw.input' %x in @main (4) too loud to cancel in the sublayer that refills them)
// CHECK-SAME: the way out: d=10
