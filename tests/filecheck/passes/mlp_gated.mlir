// Swish and gated mlps through the passes: fuse-linears folds an input-side linear into both
// the gate (w1, b1) and the up projection (up, ub) and a reader into w2, keeping the
// activation; form-mlps turns a relu chain into a plain relu mlp and absorbs a reader into a
// swish mlp's w2 without changing its kind.
// RUN: tw-opt %s --split-input-file -p fuse-linears | filecheck %s
// RUN: tw-opt %s --split-input-file -p form-mlps | filecheck %s --check-prefix=FORM

builtin.module {
  tw.graph @gated {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.linear %x weight dense<[[1.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf32> bias dense<[1.0, 0.0]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    %m = tw.mlp %a act swish w1 dense<[[1.0], [1.0]]> : tensor<2x1xf32> up dense<[[2.0], [0.5]]> : tensor<2x1xf32> ub dense<[0.25]> : tensor<1xf32> w2 dense<[[1.0, -1.0]]> : tensor<1x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %y = tw.linear %m weight dense<[[2.0], [0.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @gated
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT{LITERAL}: %y = tw.mlp %x act swish w1 dense<[[1.000000e+00], [2.000000e+00]]> : tensor<2x1xf32> b1 dense<1.000000e+00> : tensor<1xf32> up dense<[[2.000000e+00], [1.000000e+00]]> : tensor<2x1xf32> ub dense<2.250000e+00> : tensor<1xf32> w2 dense<2.000000e+00> : tensor<1x1xf32> : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: tw.output "y" %y
// CHECK-NOT: tw.linear

// -----

builtin.module {
  tw.graph @form {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.linear %x weight dense<[[1.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %r = tw.relu %a : !tw.vec<2>
    %s = tw.mlp %x act swish w1 dense<[[1.0], [1.0]]> : tensor<2x1xf32> w2 dense<[[1.0, -1.0]]> : tensor<1x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %t = tw.linear %s weight dense<[[2.0], [0.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "r" %r : !tw.vec<2>
    tw.output "t" %t : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @form
// FORM-LABEL: tw.graph @form
// FORM: tw.mlp %x w1 dense<{{\[\[}}1.000000e+00, 0.000000e+00], [0.000000e+00, 2.000000e+00]]> : tensor<2x2xf32> w2
// FORM: %t = tw.mlp %x act swish w1 dense<1.000000e+00> : tensor<2x1xf32> w2 dense<2.000000e+00> : tensor<1x1xf32> : !tw.vec<2> -> !tw.vec<1>
// FORM-NOT: tw.linear
