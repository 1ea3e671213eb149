// tw.pos_table under the upstream passes: it is Pure, so `cse` merges identical tables (a
// different table stays apart) and `dce` (and `cse`, which erases dead Pure ops too) drops one
// that nothing reads, as for tw.pos_encoding.
// Full-mask and causal attentions on the same operands are different ops: `cse` keeps both.
// RUN: tw-opt %s -p cse | filecheck %s
// RUN: tw-opt %s -p dce | filecheck %s --check-prefix=DCE

builtin.module {
  tw.graph @main {
    %p1 = tw.pos_table table dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> : !tw.vec<2>
    %p2 = tw.pos_table table dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> : !tw.vec<2>
    %p3 = tw.pos_table table dense<[[0.0, 2.0], [1.0, 0.0]]> : tensor<2x2xf32> : !tw.vec<2>
    %unused = tw.pos_table table dense<[[5.0], [6.0]]> : tensor<2x1xf32> : !tw.vec<1>
    %s = tw.add %p1, %p2 : !tw.vec<2>
    %t = tw.add %s, %p3 : !tw.vec<2>
    %c = tw.attn %t, %t, %t wq dense<1.0> : tensor<2x1xf32> wk dense<1.0> : tensor<2x1xf32> wv dense<1.0> : tensor<2x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<1>
    %f = tw.attn %t, %t, %t mask full wq dense<1.0> : tensor<2x1xf32> wk dense<1.0> : tensor<2x1xf32> wv dense<1.0> : tensor<2x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<2> -> !tw.vec<1>
    %u = tw.add %c, %f : !tw.vec<1>
    tw.output "u" %u : !tw.vec<1>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT{LITERAL}: %p1 = tw.pos_table table dense<[[0.000000e+00, 1.000000e+00], [1.000000e+00, 0.000000e+00]]> : tensor<2x2xf32> : !tw.vec<2>
// CHECK-NEXT{LITERAL}: %p3 = tw.pos_table table dense<[[0.000000e+00, 2.000000e+00], [1.000000e+00, 0.000000e+00]]> : tensor<2x2xf32> : !tw.vec<2>
// CHECK-NEXT:    %s = tw.add %p1, %p1 : !tw.vec<2>
// CHECK-NEXT:    %t = tw.add %s, %p3 : !tw.vec<2>
// CHECK-NEXT:    %c = tw.attn %t, %t, %t wq
// CHECK-NEXT:    %f = tw.attn %t, %t, %t mask full wq
// CHECK-NEXT:    %u = tw.add %c, %f : !tw.vec<1>

// DCE-LABEL: tw.graph @main {
// DCE-NEXT:    %p1 = tw.pos_table
// DCE-NEXT:    %p2 = tw.pos_table
// DCE-NEXT:    %p3 = tw.pos_table
// DCE-NEXT:    %s = tw.add %p1, %p2 : !tw.vec<2>
// DCE-NOT:     %unused
