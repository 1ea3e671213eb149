// rematerialize: a cheap value read early and again after the graph's busiest step is
// recomputed next to its later reader, so its columns are free in between. %a (a linear of %x)
// is read by %e and again, through the concat, by %l after the 12-wide %w; %x is live there
// anyway (the concat reads it too), so a copy of %a before the concat costs no column.
// RUN: tw-opt %s -p rematerialize | filecheck %s
// RUN: tw-opt %s -p 'rematerialize{rounds=0}' | filecheck %s --check-prefix=NONE
// The lowering does the same by itself where the width needs it (the minimum falls from 20
// to 16), and shows the clone it schedules:
// RUN: tw-opt %s -p 'lower-to-transformer{d=16 d-head=1 d-hidden=64}' | filecheck %s --check-prefix=LOWER
// RUN: tw-opt %s -p 'lower-to-transformer{d=20 d-head=1 d-hidden=64}' | filecheck %s --check-prefix=NONE

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.linear %x weight dense<[[1.0, 2.0, 0.5, 1.0], [0.5, 1.0, 1.0, -1.0]]> : tensor<2x4xf32> : !tw.vec<2> -> !tw.vec<4>
    %e = tw.relu %a : !tw.vec<4>
    %w = tw.mlp %e w1 dense<0.25> : tensor<4x12xf32> w2 dense<0.125> : tensor<12x12xf32> : !tw.vec<4> -> !tw.vec<12>
    %n = tw.mlp %w w1 dense<0.25> : tensor<12x4xf32> w2 dense<0.125> : tensor<4x1xf32> : !tw.vec<12> -> !tw.vec<1>
    %c = tw.concat(%a, %n, %x) : !tw.vec<4>, !tw.vec<1>, !tw.vec<2> -> !tw.vec<7>
    %l = tw.mlp %c w1 dense<0.25> : tensor<7x3xf32> w2 dense<0.5> : tensor<3x1xf32> : !tw.vec<7> -> !tw.vec<1>
    tw.output "y" %l : !tw.vec<1>
  }
}

// CHECK:      %a = tw.linear %x
// CHECK-NEXT: %e = tw.relu %a
// CHECK:      %n = tw.mlp %w
// CHECK-NEXT: %[[A:.*]] = tw.linear %x
// CHECK-NEXT: %c = tw.concat(%[[A]], %n, %x)

// NONE-NOT: tw.linear %x weight dense<{{.*}}> : tensor<2x4xf32> {{.*}}tw.linear %x
// NONE:     %c = tw.concat(%a, %n, %x)

// LOWER:      tw.graph @main attributes {tw.n_layers = 4
// LOWER:      %[[A:.*]] = tw.linear %x {{.*}}tw.layer = 3
// LOWER-NEXT: %c = tw.concat(%[[A]], %n, %x)
