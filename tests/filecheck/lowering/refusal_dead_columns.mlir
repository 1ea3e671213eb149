// RUN: tw-opt %s -p 'lower-to-transformer{d=8 d-head=2 d-hidden=4}' --verify-diagnostics | filecheck %s
// Dead columns, not live values, block: one value is live at a time (4 columns, and d=8 leaves
// 6), but %a may refill %x's columns only with cancels beside it (two neurons a column: x's
// sign is unknown), and its sublayer's 4 neurons are all %a's. The widths named are those a
// scan finds (tests/test_refusals.py): d=10 at d_hidden=4, or d_hidden=12 at d=8, the cheaper.

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<4>
    %a = tw.mlp %x w1 dense<1.0> : tensor<4x4xf32> w2 dense<1.0> : tensor<4x4xf32> : !tw.vec<4> -> !tw.vec<4>
    %b = tw.mlp %a w1 dense<1.0> : tensor<4x4xf32> w2 dense<1.0> : tensor<4x4xf32> : !tw.vec<4> -> !tw.vec<4>
    tw.output "y" %b : !tw.vec<4>
  }
}

// CHECK:      residual width binds at d=8: 6 free columns, and the best order found needs 8 at once
// CHECK-SAME: smallest d that fits (d_head=2, d_hidden=4): 10; smallest d_hidden that fits at d=8: 12;
// CHECK-SAME: dead columns block, not live values: an order whose live values need 4 columns exists,
// CHECK-SAME: but 'tw.mlp' %a in @main writes 4 new columns as the operands it reads last ('tw.input' %x in @main (4)) die,
// CHECK-SAME: and may refill only 0 of theirs (the cancels of 4 of them do not fit beside it in d_hidden=4 neurons);
// CHECK-SAME: ways out, cheapest first: d_hidden=12 (468 parameters a layer), then d=10 (494 parameters a layer)
