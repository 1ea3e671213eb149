// sequential-scope{batch-size=auto} schedules each candidate K on a copy and keeps the one
// with the fewest layers; ties keep fewer gates. Three iterations, each 4 -> 16 -> 64 -> 16
// -> 1. At d=144 K=1 takes 10 layers and K=2 (iteration 2 waits for iteration 0) 7. Ungated
// takes 6: the scheduler's own order gate delays the third iteration's wide step only as
// long as the residual needs (K=2's edge also delays its narrow start), so auto adds no gate.
// At d=96 and d=256 no K beats ungated either; with search-budget=0 the analytic rule decides
// (K=2 at d=96).
// RUN: tw-opt %s -p 'sequential-scope{d=144 batch-size=2}' | filecheck %s --check-prefix=K2
// RUN: tw-opt %s -p 'sequential-scope{d=144 batch-size=2},sequential-scope{d=144}' | filecheck %s --check-prefix=K2
// RUN: tw-opt %s -p 'sequential-scope{d=144 batch-size=2},lower-to-transformer{d=144}' | filecheck %s --check-prefix=AUTO
// RUN: tw-opt %s -p 'sequential-scope{d=144}' | filecheck %s --check-prefix=NONE
// RUN: tw-opt %s -p 'lower-to-transformer{d=144}' | filecheck %s --check-prefix=UNGATED
// RUN: tw-opt %s -p 'sequential-scope{d=144 batch-size=1},lower-to-transformer{d=144}' | filecheck %s --check-prefix=SERIAL
// RUN: tw-opt %s -p 'sequential-scope{d=96 search-budget=0}' | filecheck %s --check-prefix=RULE
// RUN: tw-opt %s -p 'sequential-scope{d=96}' | filecheck %s --check-prefix=NONE
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

// K2:      %a1 = tw.mlp %x
// K2:      %[[G:.*]] = tw.after %x, (%t0) : !tw.vec<4>, !tw.vec<1>
// K2-NEXT: %a2 = tw.mlp %[[G]]
// K2-NOT:  tw.after

// AUTO: tw.graph @main
// AUTO-SAME: tw.n_layers = 7
// UNGATED: tw.graph @main
// UNGATED-SAME: tw.n_layers = 6
// SERIAL: tw.graph @main
// SERIAL-SAME: tw.n_layers = 10

// RULE:     %a1 = tw.mlp %x
// RULE:     %[[G:.*]] = tw.after %x, (%t0) : !tw.vec<4>, !tw.vec<1>
// RULE-NEXT: %a2 = tw.mlp %[[G]]
// RULE-NOT: tw.after

// NONE-NOT: tw.after
