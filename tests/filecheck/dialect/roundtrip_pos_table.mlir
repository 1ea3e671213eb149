// tw.pos_table: a per-position table given by the graph (row i at position i).
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP).
// RUN: TW_ROUNDTRIP
// RUN: tw-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

builtin.module {
  tw.graph @main {
    %onehot = tw.pos_table table dense<[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]> : tensor<3x3xf32> : !tw.vec<3>
    %p = tw.pos_table table dense<[[0.0, 1.0], [1.0, 0.5]]> : tensor<2x2xf32> {tw.annotation = "pos"} : !tw.vec<2>
    tw.output "onehot" %onehot : !tw.vec<3>
    tw.output "p" %p : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT{LITERAL}: %onehot = tw.pos_table table dense<[[1.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00, 1.000000e+00]]> : tensor<3x3xf32> : !tw.vec<3>
// CHECK-NEXT{LITERAL}: %p = tw.pos_table table dense<[[0.000000e+00, 1.000000e+00], [1.000000e+00, 5.000000e-01]]> : tensor<2x2xf32> {tw.annotation = "pos"} : !tw.vec<2>
// CHECK-NEXT: tw.output "onehot" %onehot : !tw.vec<3>
// CHECK-NEXT: tw.output "p" %p : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}

// GENERIC{LITERAL}: %p = "tw.pos_table"() <{table = dense<[[0.000000e+00, 1.000000e+00], [1.000000e+00, 5.000000e-01]]> : tensor<2x2xf32>}> {tw.annotation = "pos"} : () -> !tw.vec<2>
