// tw.mlp act / up / ub: every verifier rejection, one per chunk, located at the op.
// RUN: tw-opt %s --split-input-file --verify-diagnostics | filecheck %s

// mlp: the activation is relu or swish (a kind that is not an identifier prints quoted).
builtin.module {
  tw.graph @bad_act {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_mlp_gated.mlir:[[# @LINE + 1]]:5: 'tw.mlp' %y in @bad_act: act must be one of relu, swish, got 'gelu'
    %y = tw.mlp %x act gelu w1 dense<1.0> : tensor<2x3xf32> w2 dense<1.0> : tensor<3x1xf32> : !tw.vec<2> -> !tw.vec<1>
  }
}

// -----

// mlp: the up projection reads the input: as many rows as the input is wide.
builtin.module {
  tw.graph @bad_up_rows {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_mlp_gated.mlir:[[# @LINE + 1]]:5: 'tw.mlp' %y in @bad_up_rows: up has 3 rows but its input is 2 wide
    %y = tw.mlp %x w1 dense<1.0> : tensor<2x3xf32> up dense<1.0> : tensor<3x3xf32> w2 dense<1.0> : tensor<3x1xf32> : !tw.vec<2> -> !tw.vec<1>
  }
}

// -----

// mlp: one up column per lane (w1's columns).
builtin.module {
  tw.graph @bad_up_cols {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_mlp_gated.mlir:[[# @LINE + 1]]:5: 'tw.mlp' %y in @bad_up_cols: up has 4 columns
    %y = tw.mlp %x act swish w1 dense<1.0> : tensor<2x3xf32> up dense<1.0> : tensor<2x4xf32> w2 dense<1.0> : tensor<3x1xf32> : !tw.vec<2> -> !tw.vec<1>
  }
}

// -----

// mlp: an up bias needs an up projection.
builtin.module {
  tw.graph @bad_ub_alone {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_mlp_gated.mlir:[[# @LINE + 1]]:5: 'tw.mlp' %y in @bad_ub_alone: ub (the up bias) needs an up projection (up)
    %y = tw.mlp %x w1 dense<1.0> : tensor<2x3xf32> ub dense<1.0> : tensor<3xf32> w2 dense<1.0> : tensor<3x1xf32> : !tw.vec<2> -> !tw.vec<1>
  }
}

// -----

// mlp: the up bias has one entry per lane.
builtin.module {
  tw.graph @bad_ub_len {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors_mlp_gated.mlir:[[# @LINE + 1]]:5: 'tw.mlp' %y in @bad_ub_len: ub must be a vector of length 3, got shape [2]
    %y = tw.mlp %x w1 dense<1.0> : tensor<2x3xf32> up dense<1.0> : tensor<2x3xf32> ub dense<1.0> : tensor<2xf32> w2 dense<1.0> : tensor<3x1xf32> : !tw.vec<2> -> !tw.vec<1>
  }
}
