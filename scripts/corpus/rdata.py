"""Minimal reader for R's serialization format (XDR, versions 2 and 3) and lazy-load databases
(.rdx index + .rdb records), enough to pull character vectors out of an R package's data/ without
R. Format: R Internals, "Serialization Formats" (https://cran.r-project.org/doc/manuals/r-release/R-ints.html)
and the lazy-load DB layout: the .rdx is a (gzip- or zlib-compressed) serialized list with
$variables = named list of (offset, length) pairs into the .rdb; each .rdb record is a 4-byte
big-endian uncompressed length followed by a zlib stream holding one serialized object.
Python standard library only.
"""
import gzip
import struct
import zlib

NILVALUE, EMPTYENV, BASEENV, GLOBALENV, UNBOUND, MISSINGARG, BASENAMESPACE = 254, 242, 241, 253, 252, 251, 247
REFSXP, PERSISTSXP, NAMESPACESXP, PACKAGESXP = 255, 247, 249, 248
SYMSXP, LISTSXP, CLOSXP, ENVSXP, PROMSXP, LANGSXP = 1, 2, 3, 4, 5, 6
CHARSXP, LGLSXP, INTSXP, REALSXP, CPLXSXP, STRSXP = 9, 10, 13, 14, 15, 16
DOTSXP, VECSXP, EXPRSXP, BCODESXP, EXTPTRSXP, WEAKREFSXP, RAWSXP, S4SXP = 17, 19, 20, 21, 22, 23, 24, 25
ALTREP_SXP, ATTRLISTSXP, ATTRLANGSXP = 238, 239, 240


class RObject:
    """A serialized R value: `kind` (SEXP type), `value` (list / str / numbers), `attrs` (dict)."""
    def __init__(self, kind, value, attrs=None):
        self.kind, self.value, self.attrs = kind, value, attrs or {}

    def names(self):
        n = self.attrs.get('names')
        return n.value if n is not None else None


class Unserializer:
    def __init__(self, buf):
        self.b, self.p, self.refs = buf, 0, []

    def _take(self, n):
        if n < 0 or self.p + n > len(self.b):
            raise ValueError(f'R data truncated at byte {self.p}')
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def _int(self):
        return struct.unpack('>i', self._take(4))[0]

    def _length(self):
        n = self._int()
        if n == -1:  # long vector: two more ints
            hi, lo = self._int(), self._int()
            n = (hi << 32) | (lo & 0xffffffff)
        return n

    def read(self):
        fmt = self._take(2)
        if fmt != b'X\n':
            raise ValueError('only the XDR ("X\\n") serialization format is supported')
        version = self._int()
        self._int(), self._int()  # writer / minimal reader R versions
        if version == 3:
            self._take(self._int())  # native encoding name
        elif version != 2:
            raise ValueError(f'unsupported R serialization version {version}')
        return self._item()

    def _attrs_from_pairlist(self, pl):
        out = {}
        while pl is not None and pl.kind in (LISTSXP, ATTRLISTSXP):
            tag, car, cdr = pl.value
            if tag is not None:
                out[tag] = car
            pl = cdr
        return out

    def _item(self):
        flags = self._int()
        t = flags & 0xff
        levels = flags >> 12
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if t in (NILVALUE, EMPTYENV, BASEENV, GLOBALENV, UNBOUND, MISSINGARG, BASENAMESPACE):
            return None
        if t == REFSXP:
            idx = flags >> 8
            if idx == 0:
                idx = self._int()
            return self.refs[idx - 1]
        if t in (PERSISTSXP, NAMESPACESXP, PACKAGESXP):
            info = self._item()  # a STRSXP describing it
            obj = RObject(t, info)
            self.refs.append(obj)
            return obj
        if t == SYMSXP:
            name = self._item()
            sym = name.value if isinstance(name, RObject) else name
            self.refs.append(sym)
            return sym
        if t == CHARSXP:
            n = self._int()
            if n == -1:
                return None  # NA_character_
            raw = self._take(n)
            latin1 = levels & (1 << 2)
            return raw.decode('latin-1' if latin1 else 'utf-8', 'replace')
        if t in (LISTSXP, LANGSXP, CLOSXP, PROMSXP, DOTSXP, ATTRLISTSXP, ATTRLANGSXP):
            attr = self._item() if has_attr else None
            tag = self._item() if has_tag else None
            car = self._item()
            cdr = self._item()
            return RObject(t, (tag, car, cdr), self._attrs_from_pairlist(attr) if attr else None)
        if t == ENVSXP:
            self._int()  # locked
            env = RObject(t, None)
            self.refs.append(env)
            enclos, frame, hashtab, attr = self._item(), self._item(), self._item(), self._item()
            env.value = (enclos, frame, hashtab)
            return env
        if t in (STRSXP, VECSXP, EXPRSXP):
            n = self._length()
            value = [self._item() for _ in range(n)]
        elif t in (INTSXP, LGLSXP):
            n = self._length()
            value = list(struct.unpack(f'>{n}i', self._take(4 * n)))
        elif t == REALSXP:
            n = self._length()
            value = list(struct.unpack(f'>{n}d', self._take(8 * n)))
        elif t == CPLXSXP:
            n = self._length()
            value = list(struct.unpack(f'>{2 * n}d', self._take(16 * n)))
        elif t == RAWSXP:
            value = self._take(self._length())
        elif t == S4SXP:
            value = None
        else:
            raise ValueError(f'unsupported R SEXP type {t} at byte {self.p - 4}')
        attrs = None
        if has_attr:
            a = self._item()
            attrs = self._attrs_from_pairlist(a) if a is not None else None
        return RObject(t, value, attrs)


def unserialize(buf):
    return Unserializer(buf).read()


def _decompress_index(raw):
    if raw[:2] == b'\x1f\x8b':
        return gzip.decompress(raw)
    if raw[:2] == b'X\n':
        return raw
    return zlib.decompress(raw)


def lazyload(rdx_path, rdb_path):
    """Yields (name, RObject) for every variable of an R lazy-load database."""
    index = unserialize(_decompress_index(open(rdx_path, 'rb').read()))
    top = dict(zip(index.names(), index.value))
    variables = top['variables']
    rdb = open(rdb_path, 'rb').read()
    for name, span in zip(variables.names(), variables.value):
        off, ln = span.value
        rec = rdb[off:off + ln]
        if len(rec) < 5:
            raise ValueError(f'{rdb_path}: record {name} is truncated')
        kind = rec[4:5]
        if kind in (b'Z', b'2', b'X') and rec[5:7] != b'\x78\x9c':
            raise ValueError(f'{rdb_path}: record {name}: only zlib-compressed databases are supported')
        body = zlib.decompress(rec[4:])
        yield name, unserialize(body)


def character_vectors(rdx_path, rdb_path):
    """Yields (name, [str, ...]) for every variable that is a character vector."""
    for name, obj in lazyload(rdx_path, rdb_path):
        if isinstance(obj, RObject) and obj.kind == STRSXP:
            yield name, ['' if s is None else s for s in obj.value]
