// horizontal-fuse: same-slot standalone linears become one linear over a concat (block-diagonal
// weight) read back through slices; attentions sharing q, k, Wq, Wk become one attention with
// block-diagonal Wv/Wo. Dependent ops, groups wider than a head and mismatched keys stay apart.
// RUN: tw-opt %s --split-input-file -p horizontal-fuse | filecheck %s
// RUN: tw-opt %s --split-input-file -p 'horizontal-fuse{max-group=2}' | filecheck %s --check-prefix=MAX2
// RUN: tw-opt %s --split-input-file -p 'horizontal-fuse{pooled-heads=false}' | filecheck %s --check-prefix=NOPOOL

// Three scalar affine ops on distinct inputs: one linear (3 heads' work in 1), biases joined.
builtin.module {
  tw.graph @independent {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<1>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<1>
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
    %na = tw.linear %a weight dense<[[-1.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %sb = tw.linear %b weight dense<[[2.0]]> : tensor<1x1xf32> bias dense<[0.5]> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %nc = tw.linear %c weight dense<[[3.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "na" %na : !tw.vec<1>
    tw.output "sb" %sb : !tw.vec<1>
    tw.output "nc" %nc : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @independent
// CHECK:      %[[CAT:.*]] = tw.concat(%a, %b, %c) : !tw.vec<1>, !tw.vec<1>, !tw.vec<1> -> !tw.vec<3>
// CHECK-NEXT: %[[F:.*]] = tw.linear %[[CAT]] weight dense<{{\[\[}}-1.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 2.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00, 3.000000e+00]]> : tensor<3x3xf32> bias dense<[0.000000e+00, 5.000000e-01, 0.000000e+00]> : tensor<3xf32> : !tw.vec<3> -> !tw.vec<3>
// CHECK-NEXT: %na = tw.slice %[[F]][0] : !tw.vec<3> -> !tw.vec<1>
// CHECK-NEXT: %sb = tw.slice %[[F]][1] : !tw.vec<3> -> !tw.vec<1>
// CHECK-NEXT: %nc = tw.slice %[[F]][2] : !tw.vec<3> -> !tw.vec<1>
// CHECK-NEXT: tw.output "na" %na
// CHECK-NEXT: tw.output "sb" %sb
// CHECK-NEXT: tw.output "nc" %nc
// CHECK-NOT:  tw.linear

// max-group=2 closes the first group after two ops; the third stays alone.
// MAX2-LABEL: tw.graph @independent
// MAX2:       tw.concat(%a, %b)
// MAX2-NEXT:  tw.linear {{.*}} -> !tw.vec<2>
// MAX2:       %nc = tw.linear %c
// MAX2-LABEL: tw.graph @dependent

// -----

// A dependent pair: %m reads %n, so they sit in different slots and are never merged.
builtin.module {
  tw.graph @dependent {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %n = tw.linear %x weight dense<[[-1.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %m = tw.linear %n weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "n" %n : !tw.vec<1>
    tw.output "m" %m : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @dependent
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %n = tw.linear %x
// CHECK-NEXT: %m = tw.linear %n
// CHECK-NOT:  tw.slice
// CHECK-NOT:  tw.concat

// -----

// A group that would not fit one head: 10 + 10 input columns exceed d-head=16.
builtin.module {
  tw.graph @too_wide {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<10>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<10>
    %p = tw.linear %a weight dense<1.0> : tensor<10x1xf32> : !tw.vec<10> -> !tw.vec<1>
    %q = tw.linear %b weight dense<2.0> : tensor<10x1xf32> : !tw.vec<10> -> !tw.vec<1>
    tw.output "p" %p : !tw.vec<1>
    tw.output "q" %q : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @too_wide
// CHECK-NEXT: %a = tw.input
// CHECK-NEXT: %b = tw.input
// CHECK-NEXT: %p = tw.linear %a
// CHECK-NEXT: %q = tw.linear %b
// CHECK-NOT:  tw.concat

// -----

// Two attentions with the same query/key values and Wq/Wk: one attention, block-diagonal Wv/Wo.
// A third one with another Wk stays apart.
builtin.module {
  tw.graph @attn {
    %k = tw.input "k" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %w = tw.input "w" <-1.0, 1.0> : !tw.vec<1>
    %o1 = tw.attn %k, %k, %v wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[1.0]]> : tensor<1x1xf32> wo dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %o2 = tw.attn %k, %k, %w wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[3.0]]> : tensor<1x1xf32> wo dense<[[1.0]]> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %o3 = tw.attn %k, %k, %w wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[1.0], [1.0]]> : tensor<2x1xf32> wv dense<[[1.0]]> : tensor<1x1xf32> wo dense<[[1.0]]> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    tw.output "o1" %o1 : !tw.vec<1>
    tw.output "o2" %o2 : !tw.vec<1>
    tw.output "o3" %o3 : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @attn
// CHECK:      %[[VW:.*]] = tw.concat(%v, %w) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
// CHECK-NEXT: %[[A:.*]] = tw.attn %k, %k, %[[VW]] wq dense<{{\[\[}}1.000000e+00], [0.000000e+00]]> : tensor<2x1xf32> wk dense<{{\[\[}}0.000000e+00], [1.000000e+00]]> : tensor<2x1xf32> wv dense<{{\[\[}}1.000000e+00, 0.000000e+00], [0.000000e+00, 3.000000e+00]]> : tensor<2x2xf32> wo dense<{{\[\[}}2.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<2x2xf32>
// CHECK-NEXT: %o1 = tw.slice %[[A]][0]
// CHECK-NEXT: %o2 = tw.slice %[[A]][1]
// CHECK-NEXT: %o3 = tw.attn %k, %k, %w
// CHECK-NOT:  tw.attn

// -----

// Attentions sharing q, k, Wq, Wk fuse only with the same mask kind: the two full heads become
// one full attention, the causal one stays apart.
builtin.module {
  tw.graph @attn_masks {
    %k = tw.input "k" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %w = tw.input "w" <-1.0, 1.0> : !tw.vec<1>
    %c = tw.attn %k, %k, %v wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[1.0]]> : tensor<1x1xf32> wo dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %f1 = tw.attn %k, %k, %v mask full wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[3.0]]> : tensor<1x1xf32> wo dense<[[1.0]]> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %f2 = tw.attn %k, %k, %w mask full wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[1.0]]> : tensor<1x1xf32> wo dense<[[5.0]]> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    tw.output "c" %c : !tw.vec<1>
    tw.output "f1" %f1 : !tw.vec<1>
    tw.output "f2" %f2 : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @attn_masks
// CHECK:      %c = tw.attn %k, %k, %v wq
// CHECK:      %[[VW:.*]] = tw.concat(%v, %w) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
// CHECK-NEXT: %[[F:.*]] = tw.attn %k, %k, %[[VW]] mask full wq
// CHECK-NEXT: %f1 = tw.slice %[[F]][0]
// CHECK-NEXT: %f2 = tw.slice %[[F]][1]
// CHECK-NOT:  tw.attn

// -----

// 4->1 and 1->4 on distinct inputs: 1 + 1 head dims apart, min(5, 5) = 5 fused. Kept apart
// unless pooled-heads=false (a one-head-per-op allocator, where fusing saves a head).
builtin.module {
  tw.graph @mixed_shapes {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<4>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<1>
    %p = tw.linear %a weight dense<1.0> : tensor<4x1xf32> : !tw.vec<4> -> !tw.vec<1>
    %q = tw.linear %b weight dense<2.0> : tensor<1x4xf32> : !tw.vec<1> -> !tw.vec<4>
    tw.output "p" %p : !tw.vec<1>
    tw.output "q" %q : !tw.vec<4>
  }
}
// CHECK-LABEL: tw.graph @mixed_shapes
// CHECK:      %p = tw.linear %a
// CHECK-NEXT: %q = tw.linear %b
// CHECK-NOT:  tw.concat
// NOPOOL-LABEL: tw.graph @mixed_shapes
// NOPOOL:       tw.concat(%a, %b) : !tw.vec<4>, !tw.vec<1> -> !tw.vec<5>
// NOPOOL-NEXT:  tw.linear {{.*}} : !tw.vec<5> -> !tw.vec<5>
// NOPOOL-NEXT:  %p = tw.slice
// NOPOOL-NEXT:  %q = tw.slice
