// Passes keep tw.attn's rotary embedding: horizontal-fuse fuses only heads with one rope
// setting (and mask); fuse-linears folds an input-side linear into a rotary head's Wq / Wk
// (the rotation acts on the projections) but keeps a key bias it would drop from a plain head
// (rotated by position, it no longer cancels in the softmax); cse never merges two heads whose
// rope differs.
// RUN: tw-opt %s --split-input-file -p horizontal-fuse | filecheck %s --check-prefix=HFUSE
// RUN: tw-opt %s --split-input-file -p fuse-linears | filecheck %s --check-prefix=FUSE
// RUN: tw-opt %s --split-input-file -p cse | filecheck %s --check-prefix=CSE

builtin.module {
  tw.graph @fuse_same_rope_only {
    %k = tw.input "k" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %w = tw.input "w" <-1.0, 1.0> : !tw.vec<1>
    %u = tw.input "u" <-1.0, 1.0> : !tw.vec<1>
    %r1 = tw.attn %k, %k, %v rope base 100.0 dims 2 wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %r2 = tw.attn %k, %k, %w rope base 100.0 dims 2 wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %p = tw.attn %k, %k, %u wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    tw.output "r1" %r1 : !tw.vec<1>
    tw.output "r2" %r2 : !tw.vec<1>
    tw.output "p" %p : !tw.vec<1>
  }
}
// HFUSE-LABEL: tw.graph @fuse_same_rope_only
// HFUSE:      %[[VW:.*]] = tw.concat(%v, %w) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
// HFUSE-NEXT: %[[F:.*]] = tw.attn %k, %k, %[[VW]] rope base 1.000000e+02 dims 2 wq
// HFUSE:      %p = tw.attn %k, %k, %u wq
// HFUSE-NOT:  tw.attn
// HFUSE:      tw.output "p"

// -----

builtin.module {
  tw.graph @key_bias_stays {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %kb = tw.linear %x weight dense<[[2.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf32> bias dense<[1.0, -1.0]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    %kp = tw.linear %x weight dense<[[2.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf32> bias dense<[1.0, -1.0]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    %qr = tw.linear %x weight dense<[[3.0, 0.0], [0.0, 3.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %r = tw.attn %qr, %kb, %v rope base 100.0 dims 2 wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %p = tw.attn %x, %kp, %v wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
    tw.output "p" %p : !tw.vec<1>
  }
}
// FUSE-LABEL: tw.graph @key_bias_stays
// FUSE:       %kb = tw.linear %x
// FUSE-NOT:   %kp = tw.linear
// FUSE:       %r = tw.attn %x, %kb, %v rope base 1.000000e+02 dims 2 wq dense<[[3.000000e+00, 0.000000e+00], [0.000000e+00, 3.000000e+00]]>
// FUSE:       %p = tw.attn %x, %x, %v wq

// -----

builtin.module {
  tw.graph @cse_keeps_rope_apart {
    %k = tw.input "k" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.attn %k, %k, %v rope base 100.0 dims 2 wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %b = tw.attn %k, %k, %v rope base 1000.0 dims 2 wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %c = tw.attn %k, %k, %v wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    %d = tw.attn %k, %k, %v rope base 100.0 dims 2 wq dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32> wk dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> wv dense<1.0> : tensor<1x1xf32> wo dense<1.0> : tensor<1x1xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<1>
    tw.output "a" %a : !tw.vec<1>
    tw.output "b" %b : !tw.vec<1>
    tw.output "c" %c : !tw.vec<1>
    tw.output "d" %d : !tw.vec<1>
  }
}
// CSE-LABEL: tw.graph @cse_keeps_rope_apart
// CSE:       %a = tw.attn %k, %k, %v rope base 1.000000e+02 dims 2
// CSE-NEXT:  %b = tw.attn %k, %k, %v rope base 1.000000e+03 dims 2
// CSE-NEXT:  %c = tw.attn %k, %k, %v wq
// CSE-NOT:   tw.attn
// CSE:       tw.output "a" %a
// CSE-NEXT:  tw.output "b" %b
// CSE-NEXT:  tw.output "c" %c
// CSE-NEXT:  tw.output "d" %a
