#pragma once
// The calculator tool of nanochat's Engine (nanochat/engine.py use_calculator, commit 92d63d4):
// the text between <|python_start|> and <|python_end|> is evaluated when it is one of two safe
// shapes, and the result's text is fed back to the model between <|output_start|> and
// <|output_end|>. No Python runs here: both shapes are parsed and evaluated by this code.
//
// First every ',' is removed from the expression (nanochat: "1,000" -> "1000"). Then:
//  * Arithmetic: only the characters 0-9 * + - / . ( ) and space, and no "**". Python's
//    expression grammar over them: int and float literals ("12", "1.5", ".5", "3."; a decimal int
//    other than zero may not start with 0), unary + and -, binary + - * / // with Python's
//    precedence and left associativity, parentheses ("()" alone is Python's empty tuple and gives
//    "()"). Python's semantics: int op int stays an
//    exact integer for + - * // (floor division), "/" is true division giving a float, an int
//    meets a float as a float. The result is written as Python's str() writes it ("7", "2.5",
//    "0.30000000000000004", "1e+16", "-0.0"). Division by zero, a syntax error, or an integer
//    result outside the signed 64-bit range (Python would give the exact big integer) is refused.
//  * String counting: only letters, digits, quotes, ( ) . _ and space; none of nanochat's
//    forbidden words (__, import, exec, eval, compile, open, file, input, raw_input, globals,
//    locals, vars, dir, getattr, setattr, delattr, hasattr, in any case); must contain ".count(".
//    Accepted form: a quoted string literal ('...' or "..."; adjacent literals concatenate as in
//    Python), then any of .lower() .upper() .strip(), then .count(<literal>); the result is
//    Python's str.count (non-overlapping occurrences; an empty needle counts len + 1).
//    nanochat's eval would also take other Python built from those characters (other str
//    methods); such text is refused here.
// Anything else is refused, and so is nesting deeper than 200 parentheses or unary signs (Python
// refuses more than 200 nested parentheses). Evaluation is bounded by the expression's length (no
// loops, no power operator), so no time limit is needed.
#include <optional>
#include <string>
#include <string_view>

namespace nanochat {

/// The text nanochat's use_calculator would return as str(result) for `expr`, or std::nullopt when
/// the expression is refused (see above). Never throws for any input.
std::optional<std::string> use_calculator(std::string_view expr);

/// Python's repr/str of a float (shortest round-trip digits; fixed notation for decimal exponents
/// -4 <= e < 16 with a ".0" on integral values, else d.ddde+XX). "inf", "-inf", "nan" as Python.
std::string python_float_str(double x);

}  // namespace nanochat
