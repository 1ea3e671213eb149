// decompose refuses library ops it cannot lower within their contracts, naming the op.
// RUN: tw-opt %s --split-input-file --verify-diagnostics -p decompose | filecheck %s

// A select branch whose value range is absurdly large (offsets would lose f32 precision).
builtin.module {
  tw.graph @huge_select {
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.input "a" <-1.0e9, 1.0e9> : !tw.vec<1>
    %b = tw.input "b" <0.0, 1.0> : !tw.vec<1>
    %s = tw.select %c, %a, %b {tw.annotation = "pick"} : !tw.vec<1>, !tw.vec<1>
    tw.output "s" %s : !tw.vec<1>
  }
}
// CHECK: decompose_errors.mlir:10:5: pass 'decompose' failed: 'tw.select' %s in @huge_select [pick]: the true branch's value range [-1e+09, 1e+09] exceeds

// -----

// A compare whose threshold/ramp ratio cannot be encoded exactly with f32 weights.
builtin.module {
  tw.graph @steep_compare {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %b = tw.compare %x, 1.0e7 ramp 1.0e-3 : !tw.vec<1>
    tw.output "b" %b : !tw.vec<1>
  }
}
// CHECK: pass 'decompose' failed: 'tw.compare' %b in @steep_compare: threshold/ramp = 1e+10
// CHECK-SAME: too large
