// Discardable attributes (tw.annotation, tw.scope, tw.iteration, tw.scope_terminal) ride in
// the attr-dict of any op and survive custom and generic round trips unchanged.
// RUN: TW_ROUNDTRIP
// RUN: tw-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> {tw.annotation = "io/x"} : !tw.vec<1>
    %a = tw.relu %x {tw.annotation = "loop/body", tw.scope = "loop", tw.iteration = 0 : i64} : !tw.vec<1>
    %b = tw.relu %a {tw.annotation = "loop/body", tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<1>
    %c = tw.relu %b {tw.scope = "loop", tw.iteration = 1 : i64, tw.scope_terminal} : !tw.vec<1>
    tw.output "y" %c {tw.annotation = "io/y"} : !tw.vec<1>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> {tw.annotation = "io/x"} : !tw.vec<1>
// CHECK-NEXT: %a = tw.relu %x {tw.annotation = "loop/body", tw.scope = "loop", tw.iteration = 0 : i64} : !tw.vec<1>
// CHECK-NEXT: %b = tw.relu %a {tw.annotation = "loop/body", tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<1>
// CHECK-NEXT: %c = tw.relu %b {tw.scope = "loop", tw.iteration = 1 : i64, tw.scope_terminal} : !tw.vec<1>
// CHECK-NEXT: tw.output "y" %c {tw.annotation = "io/y"} : !tw.vec<1>

// GENERIC: "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> {tw.annotation = "io/x"} : () -> !tw.vec<1>
// GENERIC: "tw.relu"(%b) {tw.scope = "loop", tw.iteration = 1 : i64, tw.scope_terminal} : (!tw.vec<1>) -> !tw.vec<1>
// GENERIC: "tw.output"(%c) <{name = "y"}> {tw.annotation = "io/y"} : (!tw.vec<1>) -> ()
