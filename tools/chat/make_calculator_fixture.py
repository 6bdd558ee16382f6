#!/usr/bin/env python3
"""Writes tests/fixtures/chat/calculator.json: expressions and what nanochat's own use_calculator
(nanochat/engine.py, executed as is; see make_engine_fixture.py) returns for them, as str(result)
or null when it refuses.

usage: /work/venv/bin/python tools/chat/make_calculator_fixture.py [NANOCHAT_GIT_DIR]   (torch, tiktoken)
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_engine_fixture import ROOT, nanochat_modules  # noqa: E402

EXPRESSIONS = [
    # arithmetic accepted
    "1+1", "12*34", "7/2", "10/2", "1/3", "2/3*3", "0.1+0.2", "-5+3", "--4", "+-+3", "(1+2)*3", "7//2", "-7//2",
    "7.5//2", "-7.5//2", "1,234*56", "1,000,000/7", " 3 * ( 4 + 5 ) ", "1.", ".5", "00", "0.25*4", "100000000*100000000",
    "1/100000", "1/10000", "99999999*99999999/7", "10000000000000000.0", "1000000000000000.0", "3-10", "0/5", "-0.0",
    "0*-1.5", "123456789*987654321", "2/0.5", "1.5e", "5-3-1", "64/4/2", "8//3//2", "4.0//0.5",
    # arithmetic refused
    "2**8", "1/0", "5//0", "1.0/0", "", "  ", "1 2", "012", "1..2", "1.2.3", "(1+2", "1+2)", "*3", "3*", "2(3)", "()",
    "1%2", "2^3", "1 + x", "abs(-1)",
    # string counting accepted
    "'strawberry'.count('r')", "\"strawberry\".count(\"r\")", "'banana'.count('an')", "'aaaa'.count('aa')",
    "'abc'.count('')", "'Hello World'.lower().count('o')", "'hello'.upper().count('L')", "'  a b  '.strip().count(' ')",
    "'a' 'ab'.count('a')", "'mississippi' .count( 's' )", "'a,b,c'.count(',')",
    # string counting refused
    "'abc'.find('a')", "'abc'.count", "__import__('os').count('a')", "'import'.count('i')", "'x'.count('x')+1",
    "open('f').count('a')", "'abc'.count(\"a\"", "'abc'.count('a').count('a')", "'a'.replace('a' 'b').count('b')",
    "len('abc')", "'Dir'.count('D')",
]


def main():
    git_dir = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/karpathy+nanochat/repo"
    use_calculator = nanochat_modules(git_dir)["engine"].use_calculator
    cases = []
    for e in EXPRESSIONS:
        r = use_calculator(e)
        cases.append({"expr": e, "result": None if r is None else str(r)})
    path = os.path.join(ROOT, "tests", "fixtures", "chat", "calculator.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n " + ",\n ".join(json.dumps(c) for c in cases) + "\n]\n")
    print(f"wrote {path}: {len(cases)} expressions, {sum(c['result'] is None for c in cases)} refused")


if __name__ == "__main__":
    main()
