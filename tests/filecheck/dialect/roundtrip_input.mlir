// tw.input: a named per-position input with a declared #tw.range; discardable attrs survive.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %flag = tw.input "flag" <-1.0, 1.0> {tw.annotation = "control/flag"} : !tw.vec<1>
    %digit = tw.input "digit" <0.0, 9.0> integer : !tw.vec<1>
    tw.output "y" %x : !tw.vec<2>
    tw.output "f" %flag : !tw.vec<1>
    tw.output "d" %digit : !tw.vec<1>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
// CHECK-NEXT: %flag = tw.input "flag" <-1.0, 1.0> {tw.annotation = "control/flag"} : !tw.vec<1>
// CHECK-NEXT: %digit = tw.input "digit" <0.0, 9.0> integer : !tw.vec<1>
// CHECK-NEXT: tw.output "y" %x : !tw.vec<2>
// CHECK-NEXT: tw.output "f" %flag : !tw.vec<1>
// CHECK-NEXT: tw.output "d" %digit : !tw.vec<1>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
