// sequential-scope refuses inconsistent scope tags, naming the op and its location.
// RUN: tw-opt %s --split-input-file --verify-diagnostics -p 'sequential-scope{batch-size=1}' | filecheck %s

// Two loops built with the same scope name: iteration 0 has two terminals.
builtin.module {
  tw.graph @same_name {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.relu %x {tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<1>
    %b = tw.relu %x {tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<1>
    %y = tw.concat(%a, %b) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
    tw.output "y" %y : !tw.vec<2>
  }
}
// CHECK: sequential_scope_errors.mlir:9:5: pass 'sequential-scope' failed: 'tw.relu' %b in @same_name: scope 'loop' iteration 0 has a second terminal (give each sequential_scope loop its own name)

// -----

// An iteration without a terminal.
builtin.module {
  tw.graph @no_terminal {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    %a = tw.relu %x {tw.scope = "loop", tw.iteration = 0 : i64, tw.scope_terminal} : !tw.vec<1>
    %b = tw.relu %x {tw.scope = "loop", tw.iteration = 1 : i64} : !tw.vec<1>
    %y = tw.concat(%a, %b) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
    tw.output "y" %y : !tw.vec<2>
  }
}
// CHECK: sequential_scope_errors.mlir:23:5: pass 'sequential-scope' failed: scope 'loop' iteration 1 has no op marked tw.scope_terminal (first op: 'tw.relu' %b in @no_terminal)
