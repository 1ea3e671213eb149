// fuse-linears{allow-inflate=true}: a bottleneck fuses although the product has more
// parameters (4 -> 1 -> 4: 8 parameters become a 4x4 matrix); by default it stays split.
// RUN: tw-opt %s -p 'fuse-linears{allow-inflate=true}' | filecheck %s
// RUN: tw-opt %s -p fuse-linears | filecheck %s --check-prefix=DEFAULT

builtin.module {
  tw.graph @bottleneck {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<4>
    %s = tw.linear %x weight dense<[[1.0], [1.0], [1.0], [1.0]]> : tensor<4x1xf32> : !tw.vec<4> -> !tw.vec<1>
    %y = tw.linear %s weight dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32> : !tw.vec<1> -> !tw.vec<4>
    tw.output "y" %y : !tw.vec<4>
  }
}
// CHECK-LABEL: tw.graph @bottleneck
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %y = tw.linear %x weight dense<{{\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00], [1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00], {{.*}}]]> : tensor<4x4xf32> : !tw.vec<4> -> !tw.vec<4>
// CHECK-NEXT: tw.output "y" %y

// DEFAULT-LABEL: tw.graph @bottleneck
// DEFAULT-NEXT: %x = tw.input "x"
// DEFAULT-NEXT: %s = tw.linear %x
// DEFAULT-NEXT: %y = tw.linear %s
