// RUN: tw-opt %s -p 'lower-to-transformer{d=8 d-head=2 d-hidden=16}' | filecheck %s
// d=8 leaves 6 columns. %a dies once %b reads it; %c needs room, so %a's columns are cancelled
// (tw.cancel) in the sublayer where %c is written into them.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.mlp %x w1 dense<1.0> : tensor<2x2xf32> w2 dense<1.0> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %b = tw.mlp %a w1 dense<1.0> : tensor<2x2xf32> w2 dense<1.0> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %c = tw.mlp %b w1 dense<1.0> : tensor<2x2xf32> w2 dense<1.0> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %y = tw.concat(%c, %x) : !tw.vec<2>, !tw.vec<2> -> !tw.vec<4>
    tw.output "y" %y : !tw.vec<4>
  }
}

// CHECK:      tw.n_layers = 3 : i64, tw.floor = 3 : i64
// CHECK:      %x = tw.input "x" <-1.0, 1.0> {tw.cols = array<i64: 2, 3>}
// CHECK:      %a = tw.mlp
// CHECK-SAME: {tw.layer = 0 : i64, tw.sublayer = "mlp", tw.neurons = 2 : i64, tw.cols = array<i64: [[A:4, 5]]>, tw.cancel = "L2.mlp"}
// CHECK:      %b = tw.mlp %a
// CHECK-SAME: {tw.layer = 1 : i64, tw.sublayer = "mlp", tw.neurons = 2 : i64, tw.cols = array<i64: 6, 7>}
// CHECK:      %c = tw.mlp %b
// CHECK-SAME: {tw.layer = 2 : i64, tw.sublayer = "mlp", tw.neurons = 2 : i64, tw.cols = array<i64: [[A]]>}
