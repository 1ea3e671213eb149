// RUN: tw-opt %s -p 'lower-to-transformer{d=16 d-head=4 d-hidden=16}' | filecheck %s
// %r is a single-use writer output: the add writes into %r's columns, copying only %x in (a
// bypass pair in the same MLP sublayer as %r), so the sum takes no new columns. The copy does
// not wait for %r: both land in the same columns, and the sum is ready after layer 0.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %r = tw.relu %x : !tw.vec<2>
    %s = tw.add %r, %x : !tw.vec<2>
    %y = tw.add %s, %x : !tw.vec<2>
    tw.output "y" %y : !tw.vec<2>
  }
}

// CHECK:      tw.n_layers = 1 : i64, tw.floor = 1 : i64
// CHECK:      %r = tw.relu %x {tw.layer = 0 : i64, tw.sublayer = "mlp", tw.neurons = 2 : i64, tw.cols = array<i64: [[R:[0-9]+, [0-9]+]]>}
// CHECK:      %s = tw.add %r, %x {tw.layer = 0 : i64, tw.sublayer = "mlp", tw.neurons = 4 : i64, tw.cols = array<i64: [[R]]>}
// CHECK:      %y = tw.add %s, %x {tw.layer = 0 : i64, tw.sublayer = "mlp", tw.neurons = 4 : i64, tw.cols = array<i64: [[R]]>}
