// sequential-scope{batch-size=auto} schedules each candidate K on a copy and keeps the one
// with the fewest layers. Three iterations, each 4 -> 16 -> 64 -> 16 -> 1: at d=96 the greedy
// scheduler stalls on residual width ungated and at K=2 (the rule's K), so auto falls back to
// K=1, which compiles (13 layers); at d=256 the ungated loop is optimal and auto adds no gate.
// RUN: tw-opt %s -p 'sequential-scope{d=96}' | filecheck %s --check-prefix=K1
// RUN: tw-opt %s -p 'sequential-scope{d=96},lower-to-transformer{d=96}' | filecheck %s --check-prefix=LAYERS
// RUN: tw-opt %s -p 'sequential-scope{d=96},sequential-scope{d=96}' | filecheck %s --check-prefix=K1
// RUN: tw-opt %s -p 'sequential-scope{d=96 search-budget=0}' | filecheck %s --check-prefix=RULE
// RUN: tw-opt %s -p 'sequential-scope{d=256}' | filecheck %s --check-prefix=NONE

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<4>
    %a0 = tw.mlp %x w1 dense<2.500000e-01> : tensor<4x16xf32> w2 dense<6.250000e-02> : tensor<16x16xf32> {tw.scope = "loop", tw.iteration = 0 : i64} : !tw.vec<4> -> !tw.vec<16>
    %b0 = tw.mlp %a0 w1 dense<6.250000e-02> : tensor<16x64xf32> w2 dense<1.562500e-02> : tensor<64x64xf32> {tw.scope = "loop", tw.iteration = 0 : i64} : !tw.vec<16> -> !tw.vec<64>
    %c0 = tw.mlp %b0 w1 dense<1.562500e-02> : tensor<64x16xf32> w2 dense<6.250000e-02> : tensor<16x16xf32> {tw.scope = "loop", tw.iteration = 0 : i64} : !tw.vec<64> -> !tw.vec<16>
    %t0 = tw.linear %c0 weight dense<6.250000e-02> : tensor<16x1xf32> {tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<16> -> !tw.vec<1>
    %a1 = tw.mlp %x w1 dense<2.500000e-01> : tensor<4x16xf32> w2 dense<6.250000e-02> : tensor<16x16xf32> {tw.scope = "loop", tw.iteration = 1 : i64} : !tw.vec<4> -> !tw.vec<16>
    %b1 = tw.mlp %a1 w1 dense<6.250000e-02> : tensor<16x64xf32> w2 dense<1.562500e-02> : tensor<64x64xf32> {tw.scope = "loop", tw.iteration = 1 : i64} : !tw.vec<16> -> !tw.vec<64>
    %c1 = tw.mlp %b1 w1 dense<1.562500e-02> : tensor<64x16xf32> w2 dense<6.250000e-02> : tensor<16x16xf32> {tw.scope = "loop", tw.iteration = 1 : i64} : !tw.vec<64> -> !tw.vec<16>
    %t1 = tw.linear %c1 weight dense<6.250000e-02> : tensor<16x1xf32> {tw.scope = "loop", tw.iteration = 1 : i64, tw.scope_terminal} : !tw.vec<16> -> !tw.vec<1>
    %a2 = tw.mlp %x w1 dense<2.500000e-01> : tensor<4x16xf32> w2 dense<6.250000e-02> : tensor<16x16xf32> {tw.scope = "loop", tw.iteration = 2 : i64} : !tw.vec<4> -> !tw.vec<16>
    %b2 = tw.mlp %a2 w1 dense<6.250000e-02> : tensor<16x64xf32> w2 dense<1.562500e-02> : tensor<64x64xf32> {tw.scope = "loop", tw.iteration = 2 : i64} : !tw.vec<16> -> !tw.vec<64>
    %c2 = tw.mlp %b2 w1 dense<1.562500e-02> : tensor<64x16xf32> w2 dense<6.250000e-02> : tensor<16x16xf32> {tw.scope = "loop", tw.iteration = 2 : i64} : !tw.vec<64> -> !tw.vec<16>
    %t2 = tw.linear %c2 weight dense<6.250000e-02> : tensor<16x1xf32> {tw.scope = "loop", tw.iteration = 2 : i64, tw.scope_terminal} : !tw.vec<16> -> !tw.vec<1>
    %y = tw.concat(%t0, %t1, %t2) : !tw.vec<1>, !tw.vec<1>, !tw.vec<1> -> !tw.vec<3>
    tw.output "y" %y : !tw.vec<3>
  }
}

// K1:      %t0 = tw.linear %c0
// K1-NEXT: %[[G1:.*]] = tw.after %x, (%t0) : !tw.vec<4>, !tw.vec<1>
// K1-NEXT: %a1 = tw.mlp %[[G1]]
// K1:      %t1 = tw.linear %c1
// K1-NEXT: %[[G2:.*]] = tw.after %x, (%t1) : !tw.vec<4>, !tw.vec<1>
// K1-NEXT: %a2 = tw.mlp %[[G2]]
// K1-NOT:  tw.after

// LAYERS: tw.graph @main
// LAYERS-SAME: tw.n_layers = 13

// RULE:     %a1 = tw.mlp %x
// RULE:     %[[G:.*]] = tw.after %x, (%t0) : !tw.vec<4>, !tw.vec<1>
// RULE-NEXT: %a2 = tw.mlp %[[G]]
// RULE-NOT: tw.after

// NONE-NOT: tw.after
