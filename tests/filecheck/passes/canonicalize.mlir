// canonicalize on tw ops: identity/zero linears, constant folding, add of zeros, concat and
// slice simplification. Ops that cannot simplify stay.
// RUN: tw-opt %s --split-input-file -p canonicalize | filecheck %s

// Identity linear (square identity, no bias) -> its input; an identity with a non-zero bias
// is a real op and stays.
builtin.module {
  tw.graph @identity {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %i = tw.linear %x weight dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %j = tw.linear %x weight dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> bias dense<[0.0, 0.0]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    %k = tw.linear %x weight dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> bias dense<[1.0, 0.0]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    tw.output "i" %i : !tw.vec<2>
    tw.output "j" %j : !tw.vec<2>
    tw.output "k" %k : !tw.vec<2>
  }
}
// CHECK-LABEL: tw.graph @identity
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %k = tw.linear %x
// CHECK-NEXT: tw.output "i" %x
// CHECK-NEXT: tw.output "j" %x
// CHECK-NEXT: tw.output "k" %k

// -----

// Zero linear -> literal bias; linear / relu / mlp of a literal -> literal.
builtin.module {
  tw.graph @fold {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %z = tw.linear %x weight dense<0.0> : tensor<2x1xf32> bias dense<[3.0]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    %c = tw.literal dense<[1.0, -2.0]> : tensor<2xf32> : !tw.vec<2>
    %l = tw.linear %c weight dense<[[1.0], [1.0]]> : tensor<2x1xf32> bias dense<[0.5]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    %r = tw.relu %c : !tw.vec<2>
    %m = tw.mlp %c w1 dense<[[1.0], [0.0]]> : tensor<2x1xf32> w2 dense<[[4.0]]> : tensor<1x1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
    tw.output "l" %l : !tw.vec<1>
    tw.output "r" %r : !tw.vec<2>
    tw.output "m" %m : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @fold
// CHECK-NOT: tw.linear
// CHECK-DAG: %[[Z:.*]] = tw.literal dense<3.000000e+00> : tensor<1xf32> : !tw.vec<1>
// CHECK-DAG: %[[L:.*]] = tw.literal dense<-5.000000e-01> : tensor<1xf32> : !tw.vec<1>
// CHECK-DAG: %[[R:.*]] = tw.literal dense<[1.000000e+00, 0.000000e+00]> : tensor<2xf32> : !tw.vec<2>
// CHECK-DAG: %[[M:.*]] = tw.literal dense<4.000000e+00> : tensor<1xf32> : !tw.vec<1>
// CHECK: tw.output "z" %[[Z]]
// CHECK-NEXT: tw.output "l" %[[L]]
// CHECK-NEXT: tw.output "r" %[[R]]
// CHECK-NEXT: tw.output "m" %[[M]]

// -----

// add with a zero literal -> the other operand; add of two literals -> literal; an add of two
// live values stays.
builtin.module {
  tw.graph @add {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %zero = tw.literal dense<0.0> : tensor<2xf32> : !tw.vec<2>
    %one = tw.literal dense<[1.0, 2.0]> : tensor<2xf32> : !tw.vec<2>
    %a = tw.add %zero, %x : !tw.vec<2>
    %b = tw.add %one, %one : !tw.vec<2>
    %c = tw.add %a, %x : !tw.vec<2>
    tw.output "a" %a : !tw.vec<2>
    tw.output "b" %b : !tw.vec<2>
    tw.output "c" %c : !tw.vec<2>
  }
}
// CHECK-LABEL: tw.graph @add
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %b = tw.literal dense<[2.000000e+00, 4.000000e+00]>
// CHECK-NEXT: %c = tw.add %x, %x
// CHECK-NEXT: tw.output "a" %x
// CHECK-NEXT: tw.output "b" %b
// CHECK-NEXT: tw.output "c" %c

// -----

// Nested concats flatten; a slice of the whole value is the value; a slice inside one concat
// operand reads that operand; a slice of a slice is one slice.
builtin.module {
  tw.graph @views {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %y = tw.input "y" <-1.0, 1.0> : !tw.vec<3>
    %i = tw.concat(%x, %y) : !tw.vec<2>, !tw.vec<3> -> !tw.vec<5>
    %o = tw.concat(%i, %x) : !tw.vec<5>, !tw.vec<2> -> !tw.vec<7>
    %w = tw.slice %o[0] : !tw.vec<7> -> !tw.vec<7>
    %s = tw.slice %o[2] : !tw.vec<7> -> !tw.vec<3>
    %t = tw.slice %s[1] : !tw.vec<3> -> !tw.vec<2>
    tw.output "w" %w : !tw.vec<7>
    tw.output "s" %s : !tw.vec<3>
    tw.output "t" %t : !tw.vec<2>
  }
}
// CHECK-LABEL: tw.graph @views
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %y = tw.input "y"
// CHECK-NEXT: %o = tw.concat(%x, %y, %x) : !tw.vec<2>, !tw.vec<3>, !tw.vec<2> -> !tw.vec<7>
// CHECK-NEXT: %t = tw.slice %y[1] : !tw.vec<3> -> !tw.vec<2>
// CHECK-NEXT: tw.output "w" %o
// CHECK-NEXT: tw.output "s" %y
// CHECK-NEXT: tw.output "t" %t

// -----

// Nothing to simplify: a relu of an input, a partial slice, a two-operand concat.
builtin.module {
  tw.graph @fixed {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %r = tw.relu %x : !tw.vec<2>
    %s = tw.slice %x[1] : !tw.vec<2> -> !tw.vec<1>
    %c = tw.concat(%r, %s) : !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
    tw.output "c" %c : !tw.vec<3>
  }
}
// CHECK-LABEL: tw.graph @fixed
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %r = tw.relu %x
// CHECK-NEXT: %s = tw.slice %x[1]
// CHECK-NEXT: %c = tw.concat(%r, %s)
// CHECK-NEXT: tw.output "c" %c

// -----

// A linear reading a concat with a literal operand reads the rest; the literal's rows join
// the bias (1 * [[1, 2]] + [0.5, 0.5] = [1.5, 2.5]).
builtin.module {
  tw.graph @literal_rows {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %one = tw.literal dense<[1.0]> : tensor<1xf32> : !tw.vec<1>
    %c = tw.concat(%x, %one) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
    %y = tw.linear %c weight dense<[[3.0, 4.0], [1.0, 2.0]]> : tensor<2x2xf32> bias dense<[0.5, 0.5]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    tw.output "y" %y : !tw.vec<2>
  }
}
// CHECK-LABEL: tw.graph @literal_rows
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %y = tw.linear %x weight dense<{{\[\[}}3.000000e+00, 4.000000e+00]]> : tensor<1x2xf32> bias dense<[1.500000e+00, 2.500000e+00]> : tensor<2xf32> : !tw.vec<1> -> !tw.vec<2>
// CHECK-NEXT: tw.output "y" %y

// -----

// add(v, v) with no other reader of v: the writer doubles its output (an mlp's second layer,
// a relu becomes an mlp with 2*I out), so no copy is needed. With another reader it stays.
builtin.module {
  tw.graph @add_of_itself {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %m = tw.mlp %x w1 dense<[[1.0]]> : tensor<1x1xf32> w2 dense<[[3.0]]> : tensor<1x1xf32> b2 dense<[0.25]> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %d = tw.add %m, %m : !tw.vec<1>
    %r = tw.relu %x : !tw.vec<1>
    %e = tw.add %r, %r : !tw.vec<1>
    %s = tw.relu %x : !tw.vec<1>
    %f = tw.add %s, %s : !tw.vec<1>
    tw.output "d" %d : !tw.vec<1>
    tw.output "e" %e : !tw.vec<1>
    tw.output "f" %f : !tw.vec<1>
    tw.output "s" %s : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @add_of_itself
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %d = tw.mlp %x w1 dense<1.000000e+00> : tensor<1x1xf32> w2 dense<6.000000e+00> : tensor<1x1xf32> b2 dense<5.000000e-01> : tensor<1xf32>
// CHECK-NEXT: %e = tw.mlp %x w1 dense<1.000000e+00> : tensor<1x1xf32> w2 dense<2.000000e+00> : tensor<1x1xf32>
// CHECK-NEXT: %s = tw.relu %x
// CHECK-NEXT: %f = tw.add %s, %s

// -----

// A table read only through slices loses the columns no live slice reads (the one-hot beside
// the number column a program reads); the live slices move onto the narrower table, dead
// slices go. A table some op reads whole keeps every column.
builtin.module {
  tw.graph @narrow {
    %e = tw.embedding "tokens" table dense<[[1.0, 0.0, 0.0, 5.0], [0.0, 1.0, 0.0, 6.0], [0.0, 0.0, 1.0, 7.0]]> : tensor<3x4xf32> : !tw.vec<4>
    %a = tw.slice %e[1] : !tw.vec<4> -> !tw.vec<1>
    %b = tw.slice %e[3] : !tw.vec<4> -> !tw.vec<1>
    %dead = tw.slice %e[0] : !tw.vec<4> -> !tw.vec<2>
    %p = tw.pos_table table dense<[[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]]> : tensor<3x2xf32> : !tw.vec<2>
    %q = tw.slice %p[1] : !tw.vec<2> -> !tw.vec<1>
    %w = tw.pos_table table dense<[[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]]> : tensor<3x2xf32> : !tw.vec<2>
    %v = tw.slice %w[1] : !tw.vec<2> -> !tw.vec<1>
    %s = tw.add %a, %b : !tw.vec<1>
    %t = tw.add %s, %q : !tw.vec<1>
    %u = tw.add %t, %v : !tw.vec<1>
    tw.output "u" %u : !tw.vec<1>
    tw.output "w" %w : !tw.vec<2>
  }
}
// CHECK-LABEL: tw.graph @narrow
// CHECK-NEXT: %e = tw.embedding "tokens" table dense<{{\[}}[0.000000e+00, 5.000000e+00], [1.000000e+00, 6.000000e+00], [0.000000e+00, 7.000000e+00]]> : tensor<3x2xf32> : !tw.vec<2>
// CHECK-NEXT: %a = tw.slice %e[0] : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: %b = tw.slice %e[1] : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: %p = tw.pos_table table dense<{{\[}}[1.000000e+00], [2.000000e+00], [3.000000e+00]]> : tensor<3x1xf32> : !tw.vec<1>
// CHECK-NEXT: %w = tw.pos_table table dense<{{\[}}[0.000000e+00, 1.000000e+00], [1.000000e+00, 2.000000e+00], [2.000000e+00, 3.000000e+00]]> : tensor<3x2xf32> : !tw.vec<2>
// CHECK-NEXT: %v = tw.slice %w[1]
// CHECK-NEXT: %s = tw.add %a, %b
// CHECK-NEXT: %t = tw.add %s, %p

// -----

// A linear of a table's columns that only outputs read is a table of its rows (sources cost
// no sublayer); one that other ops read (a relu, an mlp) stays. Tables nothing reads go, but the one embedding of an
// input keeps a column (it declares the input). An input has one embedding: the table grows
// the linear's columns, read by a slice.
builtin.module {
  tw.graph @table_linear {
    %e = tw.embedding "tokens" table dense<[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]> : tensor<3x2xf32> : !tw.vec<2>
    %c = tw.linear %e weight dense<[[3.0], [5.0]]> : tensor<2x1xf32> bias dense<1.0> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    %p = tw.pos_table table dense<[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]> : tensor<3x2xf32> : !tw.vec<2>
    %i = tw.slice %p[1] : !tw.vec<2> -> !tw.vec<1>
    %q = tw.linear %i weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %r = tw.relu %q : !tw.vec<1>
    %k = tw.linear %e weight dense<[[1.0], [2.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    %m = tw.mlp %k w1 dense<[[1.0]]> : tensor<1x1xf32> w2 dense<[[1.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "c" %c : !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
    tw.output "m" %m : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @table_linear
// CHECK-NEXT: %e = tw.embedding "tokens" table dense<{{\[}}[1.000000e+00, 0.000000e+00, 4.000000e+00], [0.000000e+00, 1.000000e+00, 6.000000e+00], [0.000000e+00, 0.000000e+00, 1.000000e+00]]> : tensor<3x3xf32> : !tw.vec<3>
// CHECK-NEXT: %c = tw.slice %e[2] : !tw.vec<3> -> !tw.vec<1>
// CHECK-NEXT: %p = tw.pos_table table dense<{{\[}}[0.000000e+00], [0.000000e+00], [1.000000e+00]]> : tensor<3x1xf32> : !tw.vec<1>
// CHECK-NEXT: %q = tw.linear %p
// CHECK-NEXT: %r = tw.relu %q
// CHECK-NEXT: %[[WHOLE:.*]] = tw.slice %e[0] : !tw.vec<3> -> !tw.vec<2>
// CHECK-NEXT: %k = tw.linear %[[WHOLE]]
// CHECK-NEXT: %m = tw.mlp %k
// CHECK-NEXT: tw.output "c" %c
// CHECK-NEXT: tw.output "r" %r
// CHECK-NEXT: tw.output "m" %m

// -----

// An embedding nothing reads keeps one column where it alone declares its input.
builtin.module {
  tw.graph @lone_table {
    %e = tw.embedding "tokens" table dense<[[1.0, 0.0, 7.0], [0.0, 1.0, 8.0]]> : tensor<2x3xf32> : !tw.vec<3>
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    tw.output "x" %x : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @lone_table
// CHECK-NEXT: %{{.*}} = tw.embedding "tokens" table dense<{{\[}}[1.000000e+00], [0.000000e+00]]> : tensor<2x1xf32> : !tw.vec<1>
// CHECK-NEXT: %x = tw.input "x"
