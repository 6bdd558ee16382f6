"""Reads nanochat-format files with Python's standard library only (no torch, no tiktoken).

    python3 tools/interop/read_with_stdlib.py state-dict FILE.pt   -> JSON {key: {dtype, shape, values}}
    python3 tools/interop/read_with_stdlib.py tensor FILE.pt       -> JSON {dtype, shape, values}
    python3 tools/interop/read_with_stdlib.py tokenizer FILE.pkl   -> JSON {name, pat_str, ranks, specials}
    python3 tools/interop/read_with_stdlib.py optimizer FILE.pt    -> JSON {state: {index: {key: tensor desc
                                                                     or int}}, param_groups: [...]}

The torch zip is opened with zipfile and data.pkl unpickled by pickle.Unpickler, with stand-ins for
the only callables torch.load would call (collections.OrderedDict is the real one): this proves
that the files nanochat.cpp writes are ordinary pickles of the shape torch expects. Used by the
tests in tests/core/torch_file_test.cpp and tests/tokenizer/tiktoken_pickle_test.cpp.
"""
import collections
import json
import pickle
import struct
import sys
import zipfile

DTYPES = {"FloatStorage": ("F32", "<f", 4), "BFloat16Storage": ("BF16", None, 2),
          "IntStorage": ("I32", "<i", 4), "LongStorage": ("I64", "<q", 8)}


class StorageType:
    def __init__(self, name):
        self.name = name


class Tensor:
    def __init__(self, storage, offset, size, stride, requires_grad, hooks, metadata=None):
        dtype_name, data = storage
        dt, fmt, width = DTYPES[dtype_name]
        numel = 1
        for s in size:
            numel *= s
        raw = data[offset * width:(offset + numel) * width]
        if dt == "BF16":
            vals = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        else:
            vals = list(struct.unpack("<%d%s" % (numel, fmt[1]), raw))
        assert requires_grad is False and isinstance(hooks, collections.OrderedDict) and not hooks
        self.desc = {"dtype": dt, "shape": list(size), "stride": list(stride), "values": vals}


class Encoding:  # stands in for tiktoken.core.Encoding; unpickling calls __setstate__
    def __setstate__(self, state):
        self.state = state


class TorchUnpickler(pickle.Unpickler):
    def __init__(self, f, zf, prefix):
        super().__init__(f)
        self.zf, self.prefix = zf, prefix

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return Tensor
        if module == "torch" and name in DTYPES:
            return StorageType(name)
        raise pickle.UnpicklingError("unexpected global %s.%s" % (module, name))

    def persistent_load(self, pid):
        kind, stype, key, location, numel = pid
        assert kind == "storage" and location == "cpu", pid
        data = self.zf.read(self.prefix + "data/" + key)
        assert len(data) == numel * DTYPES[stype.name][2], (key, len(data), numel)
        return (stype.name, data)


class TokenizerUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("tiktoken.core", "Encoding"):
            return Encoding
        raise pickle.UnpicklingError("unexpected global %s.%s" % (module, name))


def load_torch(path):
    with open(path, "rb") as f:
        raw = f.read()
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        prefix = names[0].split("/")[0] + "/"
        assert names[0] == prefix + "data.pkl", names
        for info in zf.infolist():
            assert info.compress_type == zipfile.ZIP_STORED, info.filename
            if info.filename.startswith(prefix + "data/"):
                # the record's data starts on a 64-byte boundary, as torch writes it
                name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
                data_start = info.header_offset + 30 + name_len + extra_len
                assert data_start % 64 == 0, (info.filename, data_start)
        assert zf.read(prefix + "byteorder") == b"little"
        return TorchUnpickler(zf.open(prefix + "data.pkl"), zf, prefix).load()


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "state-dict":
        sd = load_torch(path)
        assert isinstance(sd, collections.OrderedDict), type(sd)
        print(json.dumps({k: v.desc for k, v in sd.items()}))
    elif mode == "optimizer":  # torch.optim state_dict: plain dicts, int keys, tuples of floats
        sd = load_torch(path)
        assert type(sd) is dict and list(sd) == ["state", "param_groups"], sd.keys()
        state = {}
        for i, st in sd["state"].items():
            assert type(i) is int and type(st) is dict, (i, st)
            state[str(i)] = {k: (v.desc if isinstance(v, Tensor) else v) for k, v in st.items()}
        for g in sd["param_groups"]:
            assert type(g) is dict and all(type(p) is int for p in g["params"]), g
            assert g["kind"] != "adamw" or (type(g["betas"]) is tuple and type(g["eps"]) is float), g
        print(json.dumps({"state": state, "param_groups": sd["param_groups"]}))
    elif mode == "tensor":
        print(json.dumps(load_torch(path).desc))
    elif mode == "tokenizer":
        with open(path, "rb") as f:
            enc = TokenizerUnpickler(f).load()
        st = enc.state
        ranks = sorted((r, tok.hex()) for tok, r in st["mergeable_ranks"].items())
        print(json.dumps({"name": st["name"], "pat_str": st["pat_str"], "ranks": [h for _, h in ranks],
                          "specials": st["special_tokens"]}))
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
