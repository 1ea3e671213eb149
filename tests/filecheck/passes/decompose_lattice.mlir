// decompose: a piecewise_linear_2d of two integer operands (inputs declared `integer`) is one
// MLP chain over concat(x, y): t = x + 4 y numbers the 4 x 3 lattice, one hinge per slope
// change along t (f = x + y: each row is a ramp, so hinges at the ends of the 3 rows). Without the promise, or with lattice-neurons=0, it stays two chains.
// RUN: tw-opt %s --split-input-file -p decompose | filecheck %s
// RUN: tw-opt %s --split-input-file -p 'decompose{lattice-neurons=0}' | filecheck %s --check-prefix=OFF

builtin.module {
  tw.graph @lattice {
    %x = tw.input "x" <0.0, 3.0> integer : !tw.vec<1>
    %y = tw.input "y" <0.0, 2.0> integer : !tw.vec<1>
    %z = tw.piecewise_linear_2d %x, %y xs dense<[0.0, 3.0]> : tensor<2xf32> ys dense<[0.0, 2.0]> : tensor<2xf32> table dense<[[[0.0], [2.0]], [[3.0], [5.0]]]> : tensor<2x2x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @lattice
// CHECK:      %z_in = tw.concat(%x, %y)
// CHECK-NEXT: %z = tw.mlp %z_in w1 dense<{{\[\[}}1.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00], [4.000000e+00, 4.000000e+00, 4.000000e+00, 4.000000e+00, 4.000000e+00, 4.000000e+00]]> : tensor<2x6xf32> b1 dense<[0.000000e+00, -3.000000e+00, -4.000000e+00, -7.000000e+00, -8.000000e+00, -1.100000e+01]>
// CHECK-NOT:  tw.mlp
// CHECK:      tw.output "z" %z

// OFF-LABEL: tw.graph @lattice
// OFF:       %z_strips = tw.mlp
// OFF:       %z = tw.mlp %z_strips

// -----

builtin.module {
  tw.graph @not_promised {
    %x = tw.input "x" <0.0, 3.0> : !tw.vec<1>
    %y = tw.input "y" <0.0, 2.0> : !tw.vec<1>
    %z = tw.piecewise_linear_2d %x, %y xs dense<[0.0, 3.0]> : tensor<2xf32> ys dense<[0.0, 2.0]> : tensor<2xf32> table dense<[[[0.0], [2.0]], [[3.0], [5.0]]]> : tensor<2x2x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @not_promised
// CHECK:       %z_strips = tw.mlp
// CHECK:       %z = tw.mlp %z_strips
