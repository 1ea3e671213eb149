// Pipelines through tw-opt. `dce` alone drops the dead clamp but keeps both linears; `cse`
// merges the duplicate linears, then the two relus that now read the same value (xDSL's cse
// also erases the dead clamp); --print-between-passes shows the IR after every pass but the
// last, then the final IR.
// RUN: tw-opt %s -p dce | filecheck %s --check-prefix=DCE
// RUN: tw-opt %s -p cse,dce | filecheck %s
// RUN: tw-opt %s -p cse,dce --print-between-passes | filecheck %s --check-prefix=BETWEEN
// RUN: tw-opt %s -p 'canonicalize,cse,dce' | filecheck %s

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.linear %x weight dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %b = tw.linear %x weight dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %ra = tw.relu %a : !tw.vec<2>
    %rb = tw.relu %b : !tw.vec<2>
    %dead = tw.clamp %rb, 0.0, 1.0 : !tw.vec<2>
    %s = tw.add %ra, %rb : !tw.vec<2>
    tw.output "s" %s : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT:    %x = tw.input "x"
// CHECK-NEXT:    %a = tw.linear %x
// CHECK-NEXT:    %ra = tw.relu %a : !tw.vec<2>
// CHECK-NEXT:    %s = tw.add %ra, %ra : !tw.vec<2>
// CHECK-NEXT:    tw.output "s" %s : !tw.vec<2>
// CHECK-NEXT:  }

// DCE-LABEL: tw.graph @main {
// DCE:         %a = tw.linear %x
// DCE-NEXT:    %b = tw.linear %x
// DCE-NOT:     tw.clamp
// DCE:         %s = tw.add %ra, %rb : !tw.vec<2>

// BETWEEN:      IR after cse:
// BETWEEN-NEXT: builtin.module {
// BETWEEN-NOT:  tw.clamp
// BETWEEN:      %s = tw.add %ra, %ra : !tw.vec<2>
// BETWEEN:      builtin.module {
// BETWEEN:      %s = tw.add %ra, %ra : !tw.vec<2>
// BETWEEN-NOT:  IR after
