// form-mlps: a tw.relu and the linears around it become MLP sublayers (W1 side, W2 side,
// fanout, direct readers, through concats); what it must leave alone: a relu with no linear
// neighbour, other scope iterations, a block that would inflate an mlp's w2, copies beyond
// max-duplicate-params.
// RUN: tw-opt %s --split-input-file -p form-mlps | filecheck %s
// RUN: tw-opt %s --split-input-file -p 'form-mlps{fanout=false}' | filecheck %s --check-prefix=NOFAN
// RUN: tw-opt %s --split-input-file -p 'form-mlps{max-duplicate-params=0}' | filecheck %s --check-prefix=NODUP
// RUN: tw-opt %s --split-input-file -p 'form-mlps{allow-inflate=true}' | filecheck %s --check-prefix=INFLATE
// RUN: tw-opt %s --split-input-file -p optimize | filecheck %s --check-prefix=OPT

// linear -> relu -> linear: one mlp (w1/b1 from the first linear, w2/b2 from the second).
builtin.module {
  tw.graph @sandwich {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.linear %x weight dense<[[1.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf32> bias dense<[0.5, -0.5]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
    %r = tw.relu %a : !tw.vec<2>
    %y = tw.linear %r weight dense<[[1.0], [-1.0]]> : tensor<2x1xf32> bias dense<[0.25]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @sandwich
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %y = tw.mlp %x w1 dense<{{\[\[}}1.000000e+00, 0.000000e+00], [0.000000e+00, 2.000000e+00]]> : tensor<2x2xf32> b1 dense<[5.000000e-01, -5.000000e-01]> : tensor<2xf32> w2 dense<{{\[\[}}1.000000e+00], [-1.000000e+00]]> : tensor<2x1xf32> b2 dense<2.500000e-01> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: tw.output "y" %y
// CHECK-NOT: tw.relu
// CHECK-NOT: tw.linear
// OPT-LABEL: tw.graph @sandwich
// OPT-NEXT: %x = tw.input "x"
// OPT-NEXT: tw.mlp %x
// OPT-NEXT: tw.output "y"

// -----

// A relu with no linear neighbour already is the MLP sublayer it stands for: untouched.
builtin.module {
  tw.graph @relu_alone {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %r = tw.relu %x : !tw.vec<2>
    %s = tw.add %r, %x : !tw.vec<2>
    tw.output "s" %s : !tw.vec<2>
  }
}
// CHECK-LABEL: tw.graph @relu_alone
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %r = tw.relu %x
// CHECK-NEXT: %s = tw.add %r, %x
// OPT-LABEL: tw.graph @relu_alone
// OPT: tw.relu

// -----

// Fanout: two linear readers share one hidden layer; w2 holds both blocks, the readers
// become slices. With fanout=false a value read twice is left alone.
builtin.module {
  tw.graph @fanout {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %r = tw.relu %x : !tw.vec<2>
    %y = tw.linear %r weight dense<[[1.0], [2.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    %z = tw.linear %r weight dense<[[3.0], [4.0]]> : tensor<2x1xf32> bias dense<[1.0]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @fanout
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %[[M:.*]] = tw.mlp %x w1 {{.*}} : tensor<2x2xf32> w2 dense<{{\[\[}}1.000000e+00, 3.000000e+00], [2.000000e+00, 4.000000e+00]]> : tensor<2x2xf32> b2 dense<[0.000000e+00, 1.000000e+00]> : tensor<2xf32> : !tw.vec<2> -> !tw.vec<2>
// CHECK-NEXT: %y = tw.slice %[[M]][0] : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: %z = tw.slice %[[M]][1] : !tw.vec<2> -> !tw.vec<1>
// CHECK-NEXT: tw.output "y" %y
// CHECK-NEXT: tw.output "z" %z
// NOFAN-LABEL: tw.graph @fanout
// NOFAN-NEXT: %x = tw.input "x"
// NOFAN-NEXT: %r = tw.relu %x
// NOFAN-NEXT: %y = tw.linear %r
// NOFAN-NEXT: %z = tw.linear %r

// -----

// A relu also read directly: w2 gets an identity block for the direct reader.
builtin.module {
  tw.graph @direct {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.linear %x weight dense<[[1.0, 1.0], [1.0, -1.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %r = tw.relu %a : !tw.vec<2>
    %y = tw.linear %r weight dense<[[1.0], [2.0]]> : tensor<2x1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "r" %r : !tw.vec<2>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @direct
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %[[M:.*]] = tw.mlp %x w1 dense<{{\[\[}}1.000000e+00, 1.000000e+00], [1.000000e+00, -1.000000e+00]]> : tensor<2x2xf32> w2 dense<{{\[\[}}1.000000e+00, 0.000000e+00, 1.000000e+00], [0.000000e+00, 1.000000e+00, 2.000000e+00]]> : tensor<2x3xf32> : !tw.vec<2> -> !tw.vec<3>
// CHECK-NEXT: %r = tw.slice %[[M]][0] : !tw.vec<3> -> !tw.vec<2>
// CHECK-NEXT: %y = tw.slice %[[M]][2] : !tw.vec<3> -> !tw.vec<1>
// CHECK-NEXT: tw.output "r" %r
// CHECK-NEXT: tw.output "y" %y

// -----

// W1 through a concat: the linear feeding one operand of the relu's concat joins w1.
builtin.module {
  tw.graph @concat_in {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<2>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<1>
    %la = tw.linear %a weight dense<[[1.0], [2.0]]> : tensor<2x1xf32> bias dense<[1.0]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    %c = tw.concat(%la, %b) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
    %r = tw.relu %c : !tw.vec<2>
    tw.output "r" %r : !tw.vec<2>
  }
}
// CHECK-LABEL: tw.graph @concat_in
// CHECK: %[[C:.*]] = tw.concat(%a, %b) : !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
// CHECK-NEXT: %r = tw.mlp %[[C]] w1 dense<{{\[\[}}1.000000e+00, 0.000000e+00], [2.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00]]> : tensor<3x2xf32> b1 dense<[1.000000e+00, 0.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: tw.output "r" %r
// CHECK-NOT: tw.linear

// -----

// W2 through a concat: the reader's rows for the relu become w2 (b2 takes its bias); the
// rest of the concat keeps a linear, and an add of two single-use writers (free) joins them.
builtin.module {
  tw.graph @concat_out {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<1>
    %r = tw.relu %x : !tw.vec<1>
    %c = tw.concat(%b, %r) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
    %y = tw.linear %c weight dense<[[1.0], [-2.0]]> : tensor<2x1xf32> bias dense<[0.5]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @concat_out
// CHECK: %[[M:.*]] = tw.mlp %x w1 dense<1.000000e+00> : tensor<1x1xf32> w2 dense<-2.000000e+00> : tensor<1x1xf32> b2 dense<5.000000e-01> : tensor<1xf32>
// CHECK-NEXT: %[[L:.*]] = tw.linear %b weight dense<1.000000e+00> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
// CHECK-NEXT: %y = tw.add %[[M]], %[[L]]
// CHECK-NEXT: tw.output "y" %y
// CHECK-NOT: tw.concat

// -----

// A reader feeding an add stays free only as a writer's own output (a slice cannot
// accumulate into the add): it gets its own copy of the (small) hidden layer. With
// max-duplicate-params=0 both readers share one wide w2 instead.
builtin.module {
  tw.graph @addends {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %r = tw.relu %x : !tw.vec<1>
    %y = tw.linear %r weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %z = tw.linear %r weight dense<[[3.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %u = tw.linear %x weight dense<[[5.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %s = tw.add %y, %u : !tw.vec<1>
    tw.output "s" %s : !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @addends
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %z = tw.mlp %x w1 dense<1.000000e+00> : tensor<1x1xf32> w2 dense<3.000000e+00>
// CHECK-NEXT: %y = tw.mlp %x w1 dense<1.000000e+00> : tensor<1x1xf32> w2 dense<2.000000e+00>
// CHECK-NEXT: %u = tw.linear %x
// CHECK-NEXT: %s = tw.add %y, %u
// NODUP-LABEL: tw.graph @addends
// NODUP-NEXT: %x = tw.input "x"
// NODUP-NEXT: %[[M:.*]] = tw.mlp %x w1 dense<1.000000e+00> : tensor<1x1xf32> w2 dense<{{\[\[}}2.000000e+00, 3.000000e+00]]> : tensor<1x2xf32>
// NODUP-NEXT: %y = tw.slice %[[M]][0]
// NODUP-NEXT: %z = tw.slice %[[M]][1]
// NODUP-NEXT: %u = tw.linear %x

// -----

// Other sequential-scope iterations: nothing is absorbed across them.
builtin.module {
  tw.graph @scoped {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.linear %x weight dense<[[2.0]]> : tensor<1x1xf32> {tw.scope = "loop", tw.iteration = 0 : i64} : !tw.vec<1> -> !tw.vec<1>
    %r = tw.relu %a {tw.scope = "loop", tw.iteration = 1 : i64} : !tw.vec<1>
    %y = tw.linear %r weight dense<[[3.0]]> : tensor<1x1xf32> {tw.scope = "loop", tw.iteration = 2 : i64} : !tw.vec<1> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @scoped
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %a = tw.linear %x
// CHECK-NEXT: %r = tw.relu %a
// CHECK-NEXT: %y = tw.linear %r
// CHECK-NEXT: tw.output "y" %y

// -----

// An mlp's w2 (4x1) read by two 1->4 linears: the blocks would take 4x8 = 32 parameters
// where w2 and the readers hold 12: refused unless allow-inflate=true.
builtin.module {
  tw.graph @mlp_bottleneck {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %m = tw.mlp %x w1 dense<1.0> : tensor<2x4xf32> w2 dense<1.0> : tensor<4x1xf32> : !tw.vec<2> -> !tw.vec<1>
    %y = tw.linear %m weight dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32> : !tw.vec<1> -> !tw.vec<4>
    %z = tw.linear %m weight dense<[[1.0, 1.0, 1.0, 1.0]]> : tensor<1x4xf32> : !tw.vec<1> -> !tw.vec<4>
    tw.output "y" %y : !tw.vec<4>
    tw.output "z" %z : !tw.vec<4>
  }
}
// CHECK-LABEL: tw.graph @mlp_bottleneck
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %m = tw.mlp %x
// CHECK-NEXT: %y = tw.linear %m
// CHECK-NEXT: %z = tw.linear %m
// INFLATE-LABEL: tw.graph @mlp_bottleneck
// INFLATE-NEXT: %x = tw.input "x"
// INFLATE-NEXT: %[[M:.*]] = tw.mlp %x w1 dense<1.000000e+00> : tensor<2x4xf32> w2 {{.*}} : tensor<4x8xf32>
// INFLATE-NEXT: %y = tw.slice %[[M]][0] : !tw.vec<8> -> !tw.vec<4>
// INFLATE-NEXT: %z = tw.slice %[[M]][4] : !tw.vec<8> -> !tw.vec<4>

// -----

// Two sandwiches in a row: the middle linear narrows (2 -> 1), so the first mlp's w2 takes
// it; the second relu becomes an mlp reading the first.
builtin.module {
  tw.graph @chain {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.linear %x weight dense<[[1.0, -1.0]]> : tensor<1x2xf32> : !tw.vec<1> -> !tw.vec<2>
    %r = tw.relu %a : !tw.vec<2>
    %b = tw.linear %r weight dense<[[1.0], [1.0]]> : tensor<2x1xf32> bias dense<[-1.0]> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    %s = tw.relu %b : !tw.vec<1>
    %y = tw.linear %s weight dense<[[3.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "y" %y : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @chain
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %b = tw.mlp %x w1 dense<{{\[\[}}1.000000e+00, -1.000000e+00]]> : tensor<1x2xf32> w2 dense<1.000000e+00> : tensor<2x1xf32> b2 dense<-1.000000e+00> : tensor<1xf32>
// CHECK-NEXT: %y = tw.mlp %b w1 dense<1.000000e+00> : tensor<1x1xf32> w2 dense<3.000000e+00> : tensor<1x1xf32>
// CHECK-NEXT: tw.output "y" %y

// -----

// A small linear that others read too is copied into the relu's w1 when the relu then runs
// earlier (here: in layer 0's MLP, right after the attention, instead of after the linear).
// Beyond max-duplicate-params the relu stays.
builtin.module {
  tw.graph @copy_w1 {
    %p = tw.pos_encoding max_len 16 : !tw.vec<1>
    %a = tw.attn %p, %p, %p wq dense<[[1.0]]> : tensor<1x1xf32> wk dense<[[1.0]]> : tensor<1x1xf32> wv dense<[[1.0]]> : tensor<1x1xf32> wo dense<[[1.0]]> : tensor<1x1xf32> : !tw.vec<1>, !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    %l = tw.linear %a weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %r = tw.relu %l : !tw.vec<1>
    tw.output "l" %l : !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @copy_w1
// CHECK: %l = tw.linear %a weight dense<2.000000e+00>
// CHECK-NEXT: %r = tw.mlp %a w1 dense<2.000000e+00> : tensor<1x1xf32> w2 dense<1.000000e+00> : tensor<1x1xf32>
// CHECK-NEXT: tw.output "l" %l
// CHECK-NEXT: tw.output "r" %r
// NODUP-LABEL: tw.graph @copy_w1
// NODUP: %l = tw.linear %a
// NODUP-NEXT: %r = tw.relu %l
