// tw.attn rope: every verifier rejection, one per chunk, located at the op.
// RUN: tw-opt %s --split-input-file --verify-diagnostics | filecheck %s

// attn: rope dims are even: rotate_half pairs component p with p + dims/2.
builtin.module {
  tw.graph @bad_rope_odd {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_rope.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_rope_odd: rope dims must be even and in (0, d_qk=4] (rotate_half pairs component p with p + dims/2), got 3
    %o = tw.attn %x, %x, %x rope base 10000.0 dims 3 wq dense<1.0> : tensor<2x4xf32> wk dense<1.0> : tensor<2x4xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// attn: rope dims are at most d_qk (Wq's columns).
builtin.module {
  tw.graph @bad_rope_wide {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_rope.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_rope_wide: rope dims must be even and in (0, d_qk=4] (rotate_half pairs component p with p + dims/2), got 6
    %o = tw.attn %x, %x, %x rope base 10000.0 dims 6 wq dense<1.0> : tensor<2x4xf32> wk dense<1.0> : tensor<2x4xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// attn: rope dims are positive.
builtin.module {
  tw.graph @bad_rope_zero {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_rope.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_rope_zero: rope dims must be even and in (0, d_qk=4] (rotate_half pairs component p with p + dims/2), got 0
    %o = tw.attn %x, %x, %x rope base 10000.0 dims 0 wq dense<1.0> : tensor<2x4xf32> wk dense<1.0> : tensor<2x4xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// attn: the rope base exceeds 1 (plane frequencies base^(-2p/dims) must fall).
builtin.module {
  tw.graph @bad_rope_base {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_rope.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_rope_base: rope base must exceed 1, got 1.0
    %o = tw.attn %x, %x, %x rope base 1.0 dims 2 wq dense<1.0> : tensor<2x4xf32> wk dense<1.0> : tensor<2x4xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// attn: rope base and dims come together.
builtin.module {
  tw.graph @bad_rope_nobase {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_rope.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_rope_nobase: rope needs both a base and dims, got only dims
    %o = tw.attn %x, %x, %x rope dims 2 wq dense<1.0> : tensor<2x4xf32> wk dense<1.0> : tensor<2x4xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// attn: the generic form's rope base is finite.
builtin.module {
  tw.graph @bad_rope_inf {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors_rope.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_rope_inf: rope base must be finite, got inf
    %o = "tw.attn"(%x, %x, %x) <{rope_base = 0x7FF0000000000000 : f64, rope_dims = 2 : i64, wq = dense<1.0> : tensor<1x2xf32>, wk = dense<1.0> : tensor<1x2xf32>, wv = dense<1.0> : tensor<1x1xf32>, wo = dense<1.0> : tensor<1x1xf32>}> : (!tw.vec<1>, !tw.vec<1>, !tw.vec<1>) -> !tw.vec<1>
  }
}
