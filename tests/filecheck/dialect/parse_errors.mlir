// Text the parser rejects: one located line per chunk (--parsing-diagnostics prints it to
// stdout and goes on, as xdsl-opt does; without the flag tw-opt exits 1, see tests/test_cli.py).
// RUN: tw-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// A zero-width vector type.
builtin.module {
  tw.graph @zero_width {
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:45: vector width must be at least 1
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<0>
  }
}

// -----

// A declared range whose bounds are reversed (#tw.range verifies while parsing).
builtin.module {
  tw.graph @reversed_range {
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:5: #tw.range lower bound 8.0 exceeds upper bound -8.0
    %x = tw.input "x" <8.0, -8.0> : !tw.vec<2>
  }
}

// -----

// Ill-typed custom form: %b is 3 wide but tw.add says 2.
builtin.module {
  tw.graph @ill_typed {
    %a = tw.input "a" <-1.0, 1.0> : !tw.vec<2>
    %b = tw.input "b" <-1.0, 1.0> : !tw.vec<3>
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:21: operand is used with type !tw.vec<2>, but has been previously used or defined with type !tw.vec<3>
    %s = tw.add %a, %b : !tw.vec<2>
  }
}

// -----

// An op tw does not have.
builtin.module {
  tw.graph @unknown_op {
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:22: Operation tw.multiply is not registered
    %x = tw.multiply : !tw.vec<2>
  }
}

// -----

// Malformed syntax: the result type is missing.
builtin.module {
  tw.graph @missing_type {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: parse_errors.mlir:[[# @LINE + 2]]:3: Expected ':'
    %r = tw.relu %x
  }
}

// -----

// A value that is never defined (xDSL reports it where the chunk ends).
builtin.module {
  tw.graph @undefined_value {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
// CHECK: parse_errors.mlir:{{[0-9]+}}:{{[0-9]+}}: values used but not defined: [%nowhere]
    %r = tw.relu %nowhere : !tw.vec<2>
  }
}

// -----

// A weight property that is not a dense tensor.
builtin.module {
  tw.graph @weight_not_dense {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:47: Invalid type given for integer or float attribute
    %y = tw.linear %x weight 1.0 : !tw.vec<1> -> !tw.vec<1>
  }
}

// -----

// A string that never closes (xDSL's lexer backtracked exponentially here: this line hung).
builtin.module {
  tw.graph @unterminated_string {
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:19: unterminated string literal: the line ends before its closing '"'
    %x = tw.input "x <-8.0, 8.0> : !tw.vec<2> and a long tail of text after the quote, more than enough to hang
  }
}

// -----

// An escape the lexer does not know.
builtin.module {
  tw.graph @bad_escape {
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:21: invalid escape sequence '\q' in a string literal (use \n, \t, \\, \" or two hex digits such as \0A)
    %x = tw.input "x\q" <-8.0, 8.0> : !tw.vec<2>
  }
}

// -----

// A value sigil with no name after it.
builtin.module {
  tw.graph @sigil_alone {
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:5: expected a name right after '%' (such as %x or %0), got U+0020 (a space)
    % = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
  }
}

// -----

// Something that is not an op inside a graph.
builtin.module {
  tw.graph @not_an_op {
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:5: expected an operation, a block label such as '^bb0:' or '}' closing the region, got '42'
    42
  }
}

// -----

// A splat that would expand to ten billion numbers is refused before it is built.
builtin.module {
  tw.graph @huge_splat {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:43: dense literal of type tensor<1x9999999999xf32> holds 9999999999 numbers, above the limit of {{[0-9]+}} (MAX_DENSE_ELEMENTS)
    %y = tw.linear %x weight dense<1.0> : tensor<1x9999999999xf32> : !tw.vec<1> -> !tw.vec<1>
  }
}

// -----

// A complex element not closed by ')' (xDSL asserted: an internal AssertionError).
builtin.module {
  tw.graph @unclosed_complex {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:46: a complex element is (real, imaginary) such as (1.0, 0.0): expected ')' after its imaginary part, got ':'
    %y = tw.linear %x weight dense<[[(1.0,2.0:]]> : tensor<1x1xcomplex<f32>> : !tw.vec<1> -> !tw.vec<1>
  }
}

// -----

// A region left open at the end of the chunk.
builtin.module {
  tw.graph @unclosed {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
// CHECK: parse_errors.mlir:[[# @LINE + 1]]:1: unexpected end of input: a region opened with '{' is not closed (add the missing '}')
