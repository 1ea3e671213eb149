// sequential-scope: each entry read of iteration i goes through tw.after on iteration i-K's
// terminal (an ordering-only edge). K=1 chains every iteration; K=2 lets two run together;
// K >= #iterations gates nothing; auto gates nothing where the ungated schedule is as short as
// any gated one (here: three narrow iterations), and search-budget=0 keeps the analytic rule.
// RUN: tw-opt %s -p 'sequential-scope{batch-size=1}' | filecheck %s --check-prefix=K1
// RUN: tw-opt %s -p 'sequential-scope{batch-size=2}' | filecheck %s --check-prefix=K2
// RUN: tw-opt %s -p 'sequential-scope{batch-size=3}' | filecheck %s --check-prefix=NONE
// RUN: tw-opt %s -p 'sequential-scope{batch-size=1},sequential-scope{batch-size=1}' | filecheck %s --check-prefix=K1
// RUN: tw-opt %s -p 'sequential-scope{batch-size=auto d=64}' | filecheck %s --check-prefix=NONE
// RUN: tw-opt %s -p 'sequential-scope{batch-size=auto d=64 search-budget=0}' | filecheck %s --check-prefix=RULE

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %h0 = tw.mlp %x w1 dense<1.0> : tensor<2x4xf32> w2 dense<1.0> : tensor<4x1xf32> {tw.scope = "loop", tw.iteration = 0 : i64} : !tw.vec<2> -> !tw.vec<1>
    %t0 = tw.linear %h0 weight dense<[[2.0]]> : tensor<1x1xf32> {tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<1> -> !tw.vec<1>
    %h1 = tw.mlp %x w1 dense<2.0> : tensor<2x4xf32> w2 dense<1.0> : tensor<4x1xf32> {tw.scope = "loop", tw.iteration = 1 : i64} : !tw.vec<2> -> !tw.vec<1>
    %t1 = tw.linear %h1 weight dense<[[2.0]]> : tensor<1x1xf32> {tw.scope = "loop", tw.iteration = 1 : i64, tw.scope_terminal} : !tw.vec<1> -> !tw.vec<1>
    %h2 = tw.mlp %x w1 dense<3.0> : tensor<2x4xf32> w2 dense<1.0> : tensor<4x1xf32> {tw.scope = "loop", tw.iteration = 2 : i64} : !tw.vec<2> -> !tw.vec<1>
    %t2 = tw.linear %h2 weight dense<[[2.0]]> : tensor<1x1xf32> {tw.scope = "loop", tw.iteration = 2 : i64, tw.scope_terminal} : !tw.vec<1> -> !tw.vec<1>
    %y = tw.concat(%t0, %t1, %t2) : !tw.vec<1>, !tw.vec<1>, !tw.vec<1> -> !tw.vec<3>
    tw.output "y" %y : !tw.vec<3>
  }
}

// K1:      %h0 = tw.mlp %x
// K1:      %t0 = tw.linear %h0
// K1-NEXT: %[[G1:.*]] = tw.after %x, (%t0) : !tw.vec<2>, !tw.vec<1>
// K1-NEXT: %h1 = tw.mlp %[[G1]]
// K1:      %t1 = tw.linear %h1
// K1-NEXT: %[[G2:.*]] = tw.after %x, (%t1) : !tw.vec<2>, !tw.vec<1>
// K1-NEXT: %h2 = tw.mlp %[[G2]]
// K1-NOT:  tw.after

// K2:      %h1 = tw.mlp %x
// K2:      %[[G:.*]] = tw.after %x, (%t0) : !tw.vec<2>, !tw.vec<1>
// K2-NEXT: %h2 = tw.mlp %[[G]]
// K2-NOT:  tw.after

// NONE-NOT: tw.after

// The rule: peak width 2 (the 1-wide mlp result is still read while the 1-wide terminal is
// written) gives K = d / 2 = 32, clamped to #iterations - 1 = 2.
// RULE:     %h1 = tw.mlp %x
// RULE:     tw.after %x, (%t0)
// RULE-NOT: tw.after
