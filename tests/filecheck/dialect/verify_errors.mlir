// Every tw verifier rejection, one per chunk: the error names the op and is located at it.
// RUN: tw-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Operand widths of tw.add differ (generic form: the custom form cannot even express it).
builtin.module {
  tw.graph @bad_add {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<2>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<3>
// CHECK: tw-opt: error:
// CHECK-SAME: verify_errors.mlir:[[# @LINE + 2]]:5: 'tw.add' %s in @bad_add: operand 'rhs'
// CHECK-SAME: expected from variable 'T', but got !tw.vec<3>
    %s = "tw.add"(%a, %b) : (!tw.vec<2>, !tw.vec<3>) -> !tw.vec<2>
  }
}

// -----

// tw.relu's result must be as wide as its operand.
builtin.module {
  tw.graph @bad_relu {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: tw-opt: error:
// CHECK-SAME: verify_errors.mlir:[[# @LINE + 2]]:5: 'tw.relu' %r in @bad_relu: result 'out'
// CHECK-SAME: expected from variable 'T', but got !tw.vec<4>
    %r = "tw.relu"(%x) : (!tw.vec<2>) -> !tw.vec<4>
  }
}

// -----

// concat's operand widths must add up to its result width.
builtin.module {
  tw.graph @bad_concat {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.concat' %c in @bad_concat: operand widths sum to 4 but the result is 5 wide
    %c = tw.concat(%x, %x) : !tw.vec<2>, !tw.vec<2> -> !tw.vec<5>
  }
}

// -----

// Weight has 3 columns, the result is 2 wide.
builtin.module {
  tw.graph @bad_linear_cols {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.linear' %y in @bad_linear_cols: weight has 3 columns but must produce 2
    %y = tw.linear %x weight dense<[[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]> : tensor<2x3xf32> : !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// Weight rows must match the input width.
builtin.module {
  tw.graph @bad_linear_rows {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<3>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.linear' %y in @bad_linear_rows: weight has 2 rows but its input is 3 wide
    %y = tw.linear %x weight dense<1.0> : tensor<2x2xf32> : !tw.vec<3> -> !tw.vec<2>
  }
}

// -----

// A bias of the wrong length.
builtin.module {
  tw.graph @bad_bias {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.linear' %y in @bad_bias: bias must be a vector of length 2, got shape [3]
    %y = tw.linear %x weight dense<1.0> : tensor<2x2xf32> bias dense<0.0> : tensor<3xf32> : !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// A weight that is not a matrix.
builtin.module {
  tw.graph @bad_weight_rank {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.linear' %y in @bad_weight_rank: weight must be a 2-D matrix, got shape [2]
    %y = tw.linear %x weight dense<1.0> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<1>
  }
}

// -----

// mlp: w2 must have as many rows as w1 has columns.
builtin.module {
  tw.graph @bad_mlp {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.mlp' %y in @bad_mlp: w2 has 2 rows but its input is 3 wide
    %y = tw.mlp %x w1 dense<1.0> : tensor<2x3xf32> w2 dense<1.0> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
  }
}

// -----

// attn: wk must produce as many columns as wq.
builtin.module {
  tw.graph @bad_attn {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_attn: wk has 1 columns but must produce 2
    %o = tw.attn %x, %x, %x wq dense<1.0> : tensor<2x2xf32> wk dense<1.0> : tensor<2x1xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// attn: the mask kind is causal or full.
builtin.module {
  tw.graph @bad_mask {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_mask: mask must be one of causal, full, got 'bidirectional'
    %o = tw.attn %x, %x, %x mask bidirectional wq dense<1.0> : tensor<2x2xf32> wk dense<1.0> : tensor<2x2xf32> wv dense<1.0> : tensor<2x2xf32> wo dense<1.0> : tensor<2x2xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<2>
  }
}

// -----

// attn: the generic form's mask property is a string naming a kind.
builtin.module {
  tw.graph @bad_mask_generic {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.attn' %o in @bad_mask_generic: mask must be one of causal, full, got 'Full'
    %o = "tw.attn"(%x, %x, %x) <{mask = "Full", wq = dense<1.0> : tensor<1x1xf32>, wk = dense<1.0> : tensor<1x1xf32>, wv = dense<1.0> : tensor<1x1xf32>, wo = dense<1.0> : tensor<1x1xf32>}> : (!tw.vec<1>, !tw.vec<1>, !tw.vec<1>) -> !tw.vec<1>
  }
}

// -----

// pos_table: a 2-D table as wide as the result.
builtin.module {
  tw.graph @bad_pos_table_width {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.pos_table' %p in @bad_pos_table_width: position table has 2 columns but must produce 3
    %p = tw.pos_table table dense<1.0> : tensor<4x2xf32> : !tw.vec<3>
  }
}

// -----

// pos_table: rows by columns, not a vector.
builtin.module {
  tw.graph @bad_pos_table_rank {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.pos_table' %p in @bad_pos_table_rank: position table must be a 2-D matrix, got shape [4]
    %p = tw.pos_table table dense<1.0> : tensor<4xf32> : !tw.vec<4>
  }
}

// -----

// pos_table: finite values only (a hex blob can spell a nan).
builtin.module {
  tw.graph @bad_pos_table_value {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.pos_table' %p in @bad_pos_table_value: position table contains a non-finite value
    %p = tw.pos_table table dense<"0x0000803F0000C07F"> : tensor<2x1xf32> : !tw.vec<1>
  }
}

// -----

// An embedding table as wide as the result.
builtin.module {
  tw.graph @bad_embedding {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.embedding' %e in @bad_embedding: embedding table has 2 columns but must produce 3
    %e = tw.embedding "tokens" table dense<1.0> : tensor<4x2xf32> : !tw.vec<3>
  }
}

// -----

// A literal as long as its result.
builtin.module {
  tw.graph @bad_literal {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.literal' %c in @bad_literal: literal value must be a vector of length 3, got shape [2]
    %c = tw.literal dense<[1.0, 2.0]> : tensor<2xf32> : !tw.vec<3>
  }
}

// -----

// Breakpoints must be strictly increasing.
builtin.module {
  tw.graph @bad_breakpoints {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.piecewise_linear' %y in @bad_breakpoints: breakpoints must be strictly increasing
    %y = tw.piecewise_linear %x breakpoints dense<[0.0, 1.0, 1.0]> : tensor<3xf32> values dense<[[0.0], [1.0], [2.0]]> : tensor<3x1xf32> : !tw.vec<1> -> !tw.vec<1>
  }
}

// -----

// piecewise_linear reads a scalar.
builtin.module {
  tw.graph @bad_pwl_input {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.piecewise_linear' %y in @bad_pwl_input: input must be a scalar (!tw.vec<1>), got !tw.vec<2>
    %y = tw.piecewise_linear %x breakpoints dense<[0.0, 1.0]> : tensor<2xf32> values dense<[[0.0], [1.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
  }
}

// -----

// The 2-D grid's ys must be strictly increasing too.
builtin.module {
  tw.graph @bad_grid {
    %x = tw.input "x" <0.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.piecewise_linear_2d' %z in @bad_grid: ys must be strictly increasing
    %z = tw.piecewise_linear_2d %x, %x xs dense<[0.0, 1.0]> : tensor<2xf32> ys dense<[1.0, 0.0]> : tensor<2xf32> table dense<0.0> : tensor<2x2x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
  }
}

// -----

// The 2-D table must have shape (len(xs), len(ys), width).
builtin.module {
  tw.graph @bad_table {
    %x = tw.input "x" <0.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.piecewise_linear_2d' %z in @bad_table: table must have shape [2, 3, 1], got [2, 2, 1]
    %z = tw.piecewise_linear_2d %x, %x xs dense<[0.0, 1.0]> : tensor<2xf32> ys dense<[0.0, 0.5, 1.0]> : tensor<3xf32> table dense<0.0> : tensor<2x2x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
  }
}

// -----

// compare's ramp must be positive.
builtin.module {
  tw.graph @zero_ramp {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.compare' %b in @zero_ramp: ramp must be positive, got 0.0
    %b = tw.compare %x, 0.5 ramp 0.0 : !tw.vec<1>
  }
}

// -----

builtin.module {
  tw.graph @negative_ramp {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.compare' %b in @negative_ramp: ramp must be positive, got -0.5
    %b = tw.compare %x, 0.5 ramp -0.5 : !tw.vec<1>
  }
}

// -----

// clamp with lo > hi.
builtin.module {
  tw.graph @bad_clamp {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.clamp' %y in @bad_clamp: lo 2.0 exceeds hi 1.0
    %y = tw.clamp %x, 2.0, 1.0 : !tw.vec<2>
  }
}

// -----

// Two inputs with one name (an embedding counts as an input).
builtin.module {
  tw.graph @dup_input {
    %a = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.embedding' %b in @dup_input: duplicate input name "x"
    %b = tw.embedding "x" table dense<1.0> : tensor<4x2xf32> : !tw.vec<2>
  }
}

// -----

// Two outputs with one name.
builtin.module {
  tw.graph @dup_output {
    %a = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    tw.output "y" %a : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.output' in @dup_output: duplicate output name "y"
    tw.output "y" %a : !tw.vec<2>
  }
}

// -----

// Use before def: xDSL's parser accepts forward references; the graph verifier does not.
builtin.module {
  tw.graph @use_before_def {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.relu' %a in @use_before_def: operand #0 is used before it is defined
    %a = tw.relu %b : !tw.vec<2>
    %b = tw.relu %x : !tw.vec<2>
    tw.output "a" %a : !tw.vec<2>
  }
}

// -----

// A slice that runs past the end of its operand.
builtin.module {
  tw.graph @slice_out_of_range {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<4>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.slice' %s in @slice_out_of_range: slice [3, 5) is outside the 4-wide operand
    %s = tw.slice %x[3] : !tw.vec<4> -> !tw.vec<2>
  }
}

// -----

// A select condition must be 1 wide or as wide as the branches.
builtin.module {
  tw.graph @bad_select_cond {
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<3>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.select' %s in @bad_select_cond: condition must be 1 or 3 wide, got 2
    %s = tw.select %c, %a, %a : !tw.vec<2>, !tw.vec<3>
  }
}

// -----

// tw.after needs at least one dependency.
builtin.module {
  tw.graph @bad_after {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.after' %y in @bad_after: tw.after needs at least one dependency
    %y = "tw.after"(%x) : (!tw.vec<2>) -> !tw.vec<2>
  }
}

// -----

// Only tw ops may appear in a graph.
builtin.module {
  tw.graph @foreign_op {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'builtin.unrealized_conversion_cast' %y in @foreign_op: only tw ops may appear in a tw.graph
    %y = builtin.unrealized_conversion_cast %x : !tw.vec<2> to !tw.vec<2>
  }
}

// -----

// Empty names are rejected.
builtin.module {
  tw.graph @empty_name {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.input' %x in @empty_name: input name must not be empty
    %x = tw.input "" <-1.0, 1.0> : !tw.vec<2>
  }
}

// -----

// pos_encoding needs max_len >= 1.
builtin.module {
  tw.graph @bad_max_len {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.pos_encoding' %p in @bad_max_len: max_len must be at least 1
    %p = tw.pos_encoding max_len 0 : !tw.vec<4>
  }
}

// -----

// A tw.graph sits directly in the module: one nested in another passed the verifier and then
// crashed six passes and tw-stats.
builtin.module {
  tw.graph @outer {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.graph' @inner in @outer: a tw.graph must sit directly in a builtin.module, not in 'tw.graph'
    tw.graph @inner {
    }
    tw.output "y" %x : !tw.vec<1>
  }
}

// -----

// A graph holds exactly one block (generic form: the custom form always makes one).
"builtin.module"() ({
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:3: 'tw.graph' @no_block: a tw.graph holds exactly one block, got 0
  "tw.graph"() <{sym_name = "no_block"}> ({
  }) : () -> ()
}) : () -> ()

// -----

// tw.annotation is a string: an integer one crashed compile and tw-stats.
builtin.module {
  tw.graph @bad_annotation {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.relu' %r in @bad_annotation: attribute tw.annotation must be a string, got 3 : i64
    %r = tw.relu %x {tw.annotation = 3 : i64} : !tw.vec<1>
  }
}

// -----

// tw.iteration is an integer.
builtin.module {
  tw.graph @bad_iteration {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.relu' %r in @bad_iteration: attribute tw.iteration must be an integer, got "first"
    %r = tw.relu %x {tw.scope = "loop", tw.iteration = "first"} : !tw.vec<1>
  }
}

// -----

// tw.scope and tw.iteration come as a pair.
builtin.module {
  tw.graph @lone_scope {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.relu' %r in @lone_scope: tw.scope and tw.iteration go together
    %r = tw.relu %x {tw.scope = "loop"} : !tw.vec<1>
  }
}

// -----

// tw.scope_terminal is a unit attribute on an op of a scope iteration.
builtin.module {
  tw.graph @bad_terminal {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.relu' %r in @bad_terminal: attribute tw.scope_terminal must be a unit attribute (no value), got 1 : i64
    %r = tw.relu %x {tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal = 1 : i64} : !tw.vec<1>
  }
}

// -----

// A placement attribute (written by lower-to-transformer) must have its kind too.
builtin.module {
  tw.graph @bad_layer attributes {tw.n_layers = "two"} {
// CHECK: verify_errors.mlir:[[# @LINE - 1]]:3: 'tw.graph' @bad_layer: attribute tw.n_layers must be an integer, got "two"
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
  }
}

// -----

// Weights are f32: complex elements gave an empty message, integers were read as f32 bits.
builtin.module {
  tw.graph @complex_literal {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.literal' %c in @complex_literal: literal value must hold f32 elements, got complex<f32>
    %c = tw.literal dense<(1.0,2.0)> : tensor<1xcomplex<f32>> : !tw.vec<1>
  }
}

// -----

builtin.module {
  tw.graph @integer_weight {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.linear' %y in @integer_weight: weight must hold f32 elements, got i32
    %y = tw.linear %x weight dense<1> : tensor<2x1xi32> : !tw.vec<2> -> !tw.vec<1>
  }
}

// -----

builtin.module {
  tw.graph @f16_table {
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.embedding' %e in @f16_table: embedding table must hold f32 elements, got f16
    %e = tw.embedding "t" table dense<1.0> : tensor<3x2xf16> : !tw.vec<2>
  }
}

// -----

// A weight with an empty dimension.
builtin.module {
  tw.graph @dynamic_bias {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.linear' %y in @dynamic_bias: weight must have a static, nonempty shape, got [1, 0]
    %y = tw.linear %x weight dense<> : tensor<1x0xf32> : !tw.vec<1> -> !tw.vec<1>
  }
}

// -----

// Float properties are finite (generic form: the custom form has no literal for inf).
builtin.module {
  tw.graph @infinite_ramp {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.compare' %c in @infinite_ramp: ramp must be finite, got inf
    %c = "tw.compare"(%x) <{threshold = 0.0 : f64, ramp = 0x7FF0000000000000 : f64}> : (!tw.vec<1>) -> !tw.vec<1>
  }
}

// -----

builtin.module {
  tw.graph @infinite_clamp {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: verify_errors.mlir:[[# @LINE + 1]]:5: 'tw.clamp' %c in @infinite_clamp: lo must be finite, got -inf
    %c = "tw.clamp"(%x) <{lo = 0xFFF0000000000000 : f64, hi = 1.0 : f64}> : (!tw.vec<1>) -> !tw.vec<1>
  }
}

// -----

// A valid chunk between errors still prints.
builtin.module {
  tw.graph @fine {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    tw.output "x" %x : !tw.vec<2>
  }
}
// CHECK: tw.graph @fine {
// CHECK-NEXT: %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
