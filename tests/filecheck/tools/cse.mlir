// Upstream `cse` on tw ops: ops are Pure and weights are value-equal attributes, so identical
// ops on the same operands merge; a different bias, operand or property keeps them apart.
// RUN: tw-opt %s -p cse | filecheck %s

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.linear %x weight dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %b = tw.linear %x weight dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %c = tw.linear %x weight dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> bias dense<1.0> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    %ra = tw.relu %a : !tw.vec<2>
    %rb = tw.relu %b : !tw.vec<2>
    %s = tw.add %ra, %rb : !tw.vec<2>
    %t = tw.add %s, %c : !tw.vec<2>
    %k1 = tw.compare %t, 0.5 ramp 0.1 : !tw.vec<2>
    %k2 = tw.compare %t, 0.5 ramp 0.2 : !tw.vec<2>
    %u = tw.add %k1, %k2 : !tw.vec<2>
    tw.output "t" %t : !tw.vec<2>
    tw.output "u" %u : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT:    %x = tw.input "x"
// CHECK-NEXT{LITERAL}: %a = tw.linear %x weight dense<[[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
// CHECK-NEXT:    %c = tw.linear %x weight {{.*}} bias dense<1.000000e+00>
// CHECK-NEXT:    %ra = tw.relu %a : !tw.vec<2>
// CHECK-NEXT:    %s = tw.add %ra, %ra : !tw.vec<2>
// CHECK-NEXT:    %t = tw.add %s, %c : !tw.vec<2>
// CHECK-NEXT:    %k1 = tw.compare %t, 5.000000e-01 ramp 1.000000e-01 : !tw.vec<2>
// CHECK-NEXT:    %k2 = tw.compare %t, 5.000000e-01 ramp 2.000000e-01 : !tw.vec<2>
// CHECK-NEXT:    %u = tw.add %k1, %k2 : !tw.vec<2>
// CHECK-NEXT:    tw.output "t" %t : !tw.vec<2>
// CHECK-NEXT:    tw.output "u" %u : !tw.vec<2>
// CHECK-NEXT:  }
// CHECK-NOT: tw.linear
