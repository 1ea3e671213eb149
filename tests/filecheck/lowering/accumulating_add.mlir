// RUN: tw-opt %s -p 'lower-to-transformer{d=16 d-head=4 d-hidden=16}' | filecheck %s
// Both addends are single-use writer outputs: their writers add into one block of columns,
// so the add costs no op and no layer. An add whose addend is read elsewhere is a real op.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.mlp %x w1 dense<1.0> : tensor<2x2xf32> w2 dense<1.0> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %b = tw.linear %x weight dense<2.0> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %s = tw.add %a, %b : !tw.vec<2>
    %c = tw.relu %x : !tw.vec<2>
    %t = tw.add %c, %x : !tw.vec<2>
    tw.output "s" %s : !tw.vec<2>
    tw.output "t" %t : !tw.vec<2>
    tw.output "c" %c : !tw.vec<2>
  }
}

// CHECK:      tw.n_layers = 2 : i64, tw.floor = 2 : i64
// CHECK:      %a = tw.mlp %x
// CHECK-SAME: tw.layer = 0 : i64, tw.sublayer = "mlp", tw.neurons = 2 : i64, tw.cols = array<i64: [[S:[0-9]+, [0-9]+]]>
// CHECK:      %b = tw.linear %x
// CHECK-SAME: tw.layer = 0 : i64, tw.sublayer = "mlp", tw.neurons = 4 : i64, tw.cols = array<i64: [[S]]>
// CHECK:      %s = tw.add %a, %b {tw.accumulate, tw.cols = array<i64: [[S]]>}
// CHECK:      %t = tw.add %c, %x {tw.layer = 1 : i64, tw.sublayer = "attn", tw.dims = 2 : i64
