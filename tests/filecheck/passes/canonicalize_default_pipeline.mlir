// The default pipeline (`optimize`): canonicalize, fuse-linears, balance-sums, canonicalize,
// cse, dce (decompose is skipped: no library op here). An identity linear disappears, an
// affine chain composes into one linear, a duplicate is merged. The serial sum stays serial:
// each add writes into its dying addend's columns, so the chain is already as shallow as a tree.
// RUN: tw-opt %s -p optimize | filecheck %s

builtin.module {
  tw.graph @main {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<1>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<1>
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
    %d = tw.input "d" <-1.0, 1.0> : !tw.vec<1>
    %id = tw.linear %a weight dense<[[1.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %s1 = tw.add %id, %b : !tw.vec<1>
    %s2 = tw.add %s1, %c : !tw.vec<1>
    %s3 = tw.add %s2, %d : !tw.vec<1>
    %k1 = tw.linear %a weight dense<[[2.0]]> : tensor<1x1xf32> bias dense<[1.0]> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %k2 = tw.linear %k1 weight dense<[[-1.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %r1 = tw.relu %b : !tw.vec<1>
    %r2 = tw.relu %b : !tw.vec<1>
    tw.output "sum" %s3 : !tw.vec<1>
    tw.output "affine" %k2 : !tw.vec<1>
    tw.output "r1" %r1 : !tw.vec<1>
    tw.output "r2" %r2 : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @main
// CHECK-NOT: weight dense<1.000000e+00>
// CHECK-DAG: %[[AB:.*]] = tw.add %a, %b : !tw.vec<1>
// CHECK-DAG: %[[ABC:.*]] = tw.add %[[AB]], %c : !tw.vec<1>
// CHECK-DAG: %[[S:.*]] = tw.add %[[ABC]], %d : !tw.vec<1>
// CHECK-DAG: %[[K:.*]] = tw.linear %a weight dense<-2.000000e+00> : tensor<1x1xf32> bias dense<-1.000000e+00> : tensor<1xf32>
// CHECK-DAG: %[[R:.*]] = tw.relu %b : !tw.vec<1>
// CHECK: tw.output "sum" %[[S]]
// CHECK-NEXT: tw.output "affine" %[[K]]
// CHECK-NEXT: tw.output "r1" %[[R]]
// CHECK-NEXT: tw.output "r2" %[[R]]
