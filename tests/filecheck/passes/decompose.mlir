// decompose: each library op becomes one tw.mlp chain (piecewise_linear_2d two).
// RUN: tw-opt %s --split-input-file -p decompose | filecheck %s

// compare: two neurons per component, out = -1 + 2 relu(z + 1) - 2 relu(z), z = (x - t) / ramp.
builtin.module {
  tw.graph @compare {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<1>
    %b = tw.compare %x, 0.5 ramp 0.125 : !tw.vec<1>
    tw.output "b" %b : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @compare
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT{LITERAL}: %b = tw.mlp %x w1 dense<8.000000e+00> : tensor<1x2xf32> b1 dense<[-3.000000e+00, -4.000000e+00]> : tensor<2xf32> w2 dense<[[2.000000e+00], [-2.000000e+00]]> : tensor<2x1xf32> b2 dense<-1.000000e+00> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
// CHECK-NEXT: tw.output "b" %b
// CHECK-NOT: tw.compare

// -----


// clamp: lo + relu(x - lo) - relu(x - hi).
builtin.module {
  tw.graph @clamp {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<1>
    %c = tw.clamp %x, -1.0, 2.5 : !tw.vec<1>
    tw.output "c" %c : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @clamp
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT{LITERAL}: %c = tw.mlp %x w1 dense<1.000000e+00> : tensor<1x2xf32> b1 dense<[1.000000e+00, -2.500000e+00]> : tensor<2xf32> w2 dense<[[1.000000e+00], [-1.000000e+00]]> : tensor<2x1xf32> b2 dense<-1.000000e+00> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
// CHECK-NEXT: tw.output "c" %c
// CHECK-NOT: tw.clamp

// -----


// select with a 1-wide condition: one mlp over concat(c, a, b); gains K are powers of two.
builtin.module {
  tw.graph @select {
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.input "a" <0.0, 3.0> : !tw.vec<2>
    %b = tw.input "b" <-2.0, 1.0> : !tw.vec<2>
    %s = tw.select %c, %a, %b : !tw.vec<1>, !tw.vec<2>
    tw.output "s" %s : !tw.vec<2>
  }
}
// a in [0, 3]: o_a = 0, K_a = 2; b in [-2, 1]: o_b = -2, K_b = 2; hidden columns are
// h_a0, h_b0, h_a1, h_b1, g_b = relu(1 - c); out = h_a + h_b + (o_b / 2) g_b (o_a = 0: no g_a).
// CHECK-LABEL: tw.graph @select
// CHECK: %s_in = tw.concat(%c, %a, %b) : !tw.vec<1>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<5>
// CHECK-NEXT{LITERAL}: %s = tw.mlp %s_in w1 dense<[[2.000000e+00, -2.000000e+00, 2.000000e+00, -2.000000e+00, -1.000000e+00], [1.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00, 1.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00, 0.000000e+00, 1.000000e+00, 0.000000e+00]]> : tensor<5x5xf32> b1 dense<[-2.000000e+00, 0.000000e+00, -2.000000e+00, 0.000000e+00, 1.000000e+00]> : tensor<5xf32> w2 dense<[[1.000000e+00, 0.000000e+00], [1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00], [0.000000e+00, 1.000000e+00], [-1.000000e+00, -1.000000e+00]]> : tensor<5x2xf32> : !tw.vec<5> -> !tw.vec<2>
// CHECK-NEXT: tw.output "s" %s
// CHECK-NOT: tw.select

// -----


// piecewise_linear: one neuron per slope change, constant outside.
builtin.module {
  tw.graph @pwl {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<1>
    %p = tw.piecewise_linear %x breakpoints dense<[0.0, 1.0, 2.0]> : tensor<3xf32> values dense<[[0.0], [1.0], [3.0]]> : tensor<3x1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "p" %p : !tw.vec<1>
  }
}
// slopes 1 then 2: coefficients 1, +1, -2 (flat beyond 2).
// CHECK-LABEL: tw.graph @pwl
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT{LITERAL}: %p = tw.mlp %x w1 dense<1.000000e+00> : tensor<1x3xf32> b1 dense<[0.000000e+00, -1.000000e+00, -2.000000e+00]> : tensor<3xf32> w2 dense<[[1.000000e+00], [1.000000e+00], [-2.000000e+00]]> : tensor<3x1xf32> : !tw.vec<1> -> !tw.vec<1>
// CHECK-NEXT: tw.output "p" %p

// -----


// piecewise_linear_2d: chain 1 clamps strip coordinates, chain 2 combines them.
builtin.module {
  tw.graph @pwl2d {
    %x = tw.input "x" <-1.0, 2.0> : !tw.vec<1>
    %y = tw.input "y" <-1.0, 2.0> : !tw.vec<1>
    %z = tw.piecewise_linear_2d %x, %y xs dense<[0.0, 1.0]> : tensor<2xf32> ys dense<[0.0, 1.0]> : tensor<2xf32> table dense<[[[0.0], [1.0]], [[2.0], [4.0]]]> : tensor<2x2x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}
// f = T00 + (a + c) r + b s - c relu(r - s) with a = 2, b = 1, c = 4 - 2 - 1 + 0 = 1.
// CHECK-LABEL: tw.graph @pwl2d
// CHECK: %z_in = tw.concat(%x, %y) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
// CHECK-NEXT{LITERAL}: %z_strips = tw.mlp %z_in w1 dense<[[1.000000e+00, 1.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00, 1.000000e+00, 1.000000e+00]]> : tensor<2x4xf32> b1 dense<[0.000000e+00, -1.000000e+00, 0.000000e+00, -1.000000e+00]> : tensor<4xf32> w2 dense<[[1.000000e+00, 0.000000e+00], [-1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00], [0.000000e+00, -1.000000e+00]]> : tensor<4x2xf32> : !tw.vec<2> -> !tw.vec<2>
// CHECK-NEXT{LITERAL}: %z = tw.mlp %z_strips w1 dense<[[1.000000e+00, 0.000000e+00, 1.000000e+00], [0.000000e+00, 1.000000e+00, -1.000000e+00]]> : tensor<2x3xf32> w2 dense<[[3.000000e+00], [1.000000e+00], [-1.000000e+00]]> : tensor<3x1xf32> : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: tw.output "z" %z

// -----


// Attributes: annotation/scope/iteration on every replacement op, the terminal mark on the last.
builtin.module {
  tw.graph @attrs {
    %x = tw.input "x" <0.0, 1.0> : !tw.vec<1>
    %y = tw.input "y" <0.0, 1.0> : !tw.vec<1>
    %z = tw.piecewise_linear_2d %x, %y xs dense<[0.0, 1.0]> : tensor<2xf32> ys dense<[0.0, 1.0]> : tensor<2xf32> table dense<[[[0.0], [1.0]], [[2.0], [4.0]]]> : tensor<2x2x1xf32> {tw.annotation = "render/tex", tw.scope = "loop", tw.iteration = 2 : i64, tw.scope_terminal} : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @attrs
// CHECK: %z_in = tw.concat(%x, %y) {tw.annotation = "render/tex", tw.scope = "loop", tw.iteration = 2 : i64} :
// CHECK-NEXT: %z_strips = tw.mlp %z_in
// CHECK-SAME: {tw.annotation = "render/tex", tw.scope = "loop", tw.iteration = 2 : i64} :
// CHECK-NEXT: %z = tw.mlp %z_strips
// CHECK-SAME: {tw.annotation = "render/tex", tw.scope = "loop", tw.iteration = 2 : i64, tw.scope_terminal} :
// CHECK-NEXT: tw.output "z" %z
// CHECK-NOT: tw.piecewise_linear_2d
