// tw.select: a where cond > 0 else b; cond is 1 wide or as wide as the branches.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
    %cc = tw.input "cc" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.input "a" <-8.0, 8.0> : !tw.vec<2>
    %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
    %s = tw.select %c, %a, %b : !tw.vec<1>, !tw.vec<2>
    %t = tw.select %cc, %a, %b : !tw.vec<2>, !tw.vec<2>
    tw.output "s" %s : !tw.vec<2>
    tw.output "t" %t : !tw.vec<2>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
// CHECK-NEXT: %cc = tw.input "cc" <-1.0, 1.0> : !tw.vec<2>
// CHECK-NEXT: %a = tw.input "a" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %s = tw.select %c, %a, %b : !tw.vec<1>, !tw.vec<2>
// CHECK-NEXT: %t = tw.select %cc, %a, %b : !tw.vec<2>, !tw.vec<2>
// CHECK-NEXT: tw.output "s" %s : !tw.vec<2>
// CHECK-NEXT: tw.output "t" %t : !tw.vec<2>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
