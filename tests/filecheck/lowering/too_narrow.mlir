// RUN: tw-opt %s -p 'lower-to-transformer{d=6 d-head=2 d-hidden=16}' --verify-diagnostics | filecheck %s
// Four live 2-wide values cannot fit in the 4 free columns of d=6: the error names the binding
// resource and the smallest width that fits.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.mlp %x w1 dense<1.0> : tensor<2x2xf32> w2 dense<1.0> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %b = tw.mlp %a w1 dense<1.0> : tensor<2x2xf32> w2 dense<1.0> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %y = tw.concat(%x, %a, %b) : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<6>
    tw.output "y" %y : !tw.vec<6>
  }
}

// CHECK: residual width binds at d=6
// CHECK-SAME: smallest d that fits (d_head=2, d_hidden=16): 8
