#!/usr/bin/env python3
"""Development-time check: the `openai` Python client (PyPI) talks to a running `nanochat chat-web`
unchanged. Lists the models, asks for an answer whole and streamed, samples n=2, uses a stop
string, sends the fields frameworks fill in at neutral values (logprobs, response_format, tools,
tool_choice, penalties, metadata, ...) and two user messages in a row, reads the usage chunk of
stream_options, and checks that a bad request comes back as the client's BadRequestError and an
unknown model as its NotFoundError (code model_not_found).

    pip install openai
    nanochat chat-web -i base &          # or -i sft
    python tools/serve/openai_check.py --base-url http://127.0.0.1:8000/v1

Prints what it got and exits non-zero on the first mismatch. Not part of the test suite (the
product does not depend on Python); tests/serve/ covers the same API through a socket.
"""
import argparse
import sys

import openai


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="unused")
    print("openai", openai.__version__)

    models = client.models.list()
    model = models.data[0].id
    print("models:", [m.id for m in models.data])

    msgs = [{"role": "user", "content": "Hello! Who are you?"}]
    whole = client.chat.completions.create(model=model, messages=msgs, max_tokens=32, temperature=0)
    text = whole.choices[0].message.content
    print("whole:", repr(text), whole.choices[0].finish_reason, whole.usage)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"

    pieces = []
    for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=32, temperature=0,
                                                stream=True):
        assert chunk.object == "chat.completion.chunk"
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    print("streamed in", len(pieces), "pieces:", repr("".join(pieces)))
    assert "".join(pieces) == text, "the streamed answer differs from the whole one at temperature 0"

    two = client.chat.completions.create(model=model, messages=msgs, max_tokens=16, n=2, seed=7, top_p=0.9)
    print("n=2:", [c.message.content for c in two.choices])
    assert len(two.choices) == 2

    if len(text) > 4:
        cut = client.chat.completions.create(model=model, messages=msgs, max_tokens=32, temperature=0,
                                             stop=[text[2:5]])
        print("stop", repr(text[2:5]), "->", repr(cut.choices[0].message.content), cut.choices[0].finish_reason)
        assert cut.choices[0].message.content == text[: text.index(text[2:5])]

    neutral = client.chat.completions.create(
        model=model, messages=msgs + [{"role": "user", "content": "And again?"}], max_completion_tokens=8,
        logprobs=False, response_format={"type": "text"}, tools=[], tool_choice="none", parallel_tool_calls=False,
        presence_penalty=0.5, frequency_penalty=0.5, seed=1, user="u", metadata={"k": "v"}, store=False,
        logit_bias={}, n=1)
    print("neutral fields, two user turns:", repr(neutral.choices[0].message.content))
    usage = [c.usage for c in client.chat.completions.create(model=model, messages=msgs, max_tokens=8, stream=True,
                                                              stream_options={"include_usage": True}) if c.usage]
    print("include_usage:", usage)
    assert len(usage) == 1 and usage[0].completion_tokens > 0

    try:
        client.chat.completions.create(model="no-such-model", messages=msgs)
        print("FAIL: an unknown model was answered")
        return 1
    except openai.NotFoundError as e:
        print("unknown model ->", e.status_code, e.code)
        assert e.code == "model_not_found"

    try:
        client.chat.completions.create(model=model, messages=msgs, extra_body={"mystery": 1})
        print("FAIL: an unknown field was accepted")
        return 1
    except openai.BadRequestError as e:
        print("unknown field ->", e.status_code, e.body.get("message") if isinstance(e.body, dict) else e.body)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
