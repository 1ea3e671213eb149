// Upstream `dce` on tw ops: Pure ops whose results nothing reads go away, transitively;
// tw.output (not Pure) and everything it reads stay. Inputs are the graph's interface: tw.input
// is not Pure, so an input that nothing reads stays.
// RUN: tw-opt %s -p dce | filecheck %s

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %unused_input = tw.input "spare" <-1.0, 1.0> : !tw.vec<1>
    %dead1 = tw.linear %x weight dense<1.0> : tensor<2x3xf32> : !tw.vec<2> -> !tw.vec<3>
    %dead2 = tw.relu %dead1 : !tw.vec<3>
    %dead3 = tw.slice %dead2[1] : !tw.vec<3> -> !tw.vec<1>
    %live = tw.relu %x : !tw.vec<2>
    tw.output "y" %live : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT:    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK-NEXT:    %unused_input = tw.input "spare" <-1.0, 1.0> : !tw.vec<1>
// CHECK-NEXT:    %live = tw.relu %x : !tw.vec<2>
// CHECK-NEXT:    tw.output "y" %live : !tw.vec<2>
// CHECK-NEXT:  }
// CHECK-NOT: %dead
