// Names with non-ASCII or escaped characters (inputs, outputs, graph symbols, annotations) print
// as hex escapes of their UTF-8 bytes and parse back to the same names, in custom and generic
// form: custom -> generic -> custom gives the same text.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @"gr\C3\A4ph \22q\22" {
    %x = tw.input "\C3\A9t\C3\A9" <-1.0, 1.0> : !tw.vec<1>
    %t = tw.input "tab\09and\0Anewline \\ \22" <-1.0, 1.0> : !tw.vec<1>
    %r = tw.relu %x {tw.annotation = "\E6\97\A5\E6\9C\AC/\F0\9F\98\80"} : !tw.vec<1>
    tw.output "\CF\89" %r : !tw.vec<1>
    tw.output "plain" %t : !tw.vec<1>
  }
}

// CHECK:      tw.graph @"gr\C3\A4ph \22q\22" {
// CHECK-NEXT:   %x = tw.input "\C3\A9t\C3\A9" <-1.0, 1.0> : !tw.vec<1>
// CHECK-NEXT:   %t = tw.input "tab\09and\0Anewline \\ \22" <-1.0, 1.0> : !tw.vec<1>
// CHECK-NEXT:   %r = tw.relu %x {tw.annotation = "\E6\97\A5\E6\9C\AC/\F0\9F\98\80"} : !tw.vec<1>
// CHECK-NEXT:   tw.output "\CF\89" %r : !tw.vec<1>
// CHECK-NEXT:   tw.output "plain" %t : !tw.vec<1>
