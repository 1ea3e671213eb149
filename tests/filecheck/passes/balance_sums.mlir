// balance-sums: a serial fold of adds becomes a balanced tree; intermediates with a second
// use, and sums that are already as shallow, stay as they are.
// RUN: tw-opt %s --split-input-file -p balance-sums | filecheck %s

// Four inputs summed serially: already as shallow as a tree (each add after the first writes
// into its dying addend's columns, so all copies run in the first sublayer): left alone.
builtin.module {
  tw.graph @serial {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<2>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<2>
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<2>
    %d = tw.input "d" <-1.0, 1.0> : !tw.vec<2>
    %s1 = tw.add %a, %b : !tw.vec<2>
    %s2 = tw.add %s1, %c : !tw.vec<2>
    %s3 = tw.add %s2, %d {tw.annotation = "total"} : !tw.vec<2>
    tw.output "s" %s3 : !tw.vec<2>
  }
}
// CHECK-LABEL: tw.graph @serial
// CHECK: %s1 = tw.add %a, %b : !tw.vec<2>
// CHECK-NEXT: %s2 = tw.add %s1, %c : !tw.vec<2>
// CHECK-NEXT: %s3 = tw.add %s2, %d {tw.annotation = "total"} : !tw.vec<2>
// CHECK-NEXT: tw.output "s" %s3

// -----

// A sum over a concat with an identity-stacked weight (what tw.sum builds) is a sum node too.
builtin.module {
  tw.graph @sumlinear {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<1>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<1>
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
    %d = tw.input "d" <-1.0, 1.0> : !tw.vec<1>
    %s1 = tw.add %a, %b : !tw.vec<1>
    %s2 = tw.add %s1, %c : !tw.vec<1>
    %k = tw.concat(%s2, %d) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
    %s3 = tw.linear %k weight dense<[[1.0], [1.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "s" %s3 : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @sumlinear
// CHECK: %[[AB:.*]] = tw.add %a, %b
// CHECK-NEXT: %[[CD:.*]] = tw.add %c, %d
// CHECK-NEXT: %[[T:.*]] = tw.add %[[AB]], %[[CD]]
// CHECK-NEXT: tw.output "s" %[[T]]
// CHECK-NOT: tw.linear
// CHECK-NOT: tw.concat

// -----

// The intermediate %s2 is also an output: the chain is cut there (only {a, b, c} and
// {s2, d, e} could be rebuilt, and neither gets shallower).
builtin.module {
  tw.graph @multiuse {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<1>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<1>
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
    %d = tw.input "d" <-1.0, 1.0> : !tw.vec<1>
    %s1 = tw.add %a, %b : !tw.vec<1>
    %s2 = tw.add %s1, %c : !tw.vec<1>
    %s3 = tw.add %s2, %d : !tw.vec<1>
    tw.output "mid" %s2 : !tw.vec<1>
    tw.output "s" %s3 : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @multiuse
// CHECK: %s1 = tw.add %a, %b
// CHECK-NEXT: %s2 = tw.add %s1, %c
// CHECK-NEXT: %s3 = tw.add %s2, %d
// CHECK-NEXT: tw.output "mid" %s2

// -----

// Adds of single-use writer outputs accumulate for free in the floor's cost model: a serial
// chain of them is already as shallow as a tree, so it is left alone.
builtin.module {
  tw.graph @accumulating {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %p = tw.linear %x weight dense<[[1.0]]> : tensor<1x1xf32> bias dense<[1.0]> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %q = tw.linear %x weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %r = tw.relu %x : !tw.vec<1>
    %s1 = tw.add %p, %q : !tw.vec<1>
    %s2 = tw.add %s1, %r : !tw.vec<1>
    tw.output "s" %s2 : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @accumulating
// CHECK: %s1 = tw.add %p, %q
// CHECK-NEXT: %s2 = tw.add %s1, %r
// CHECK-NEXT: tw.output "s" %s2
