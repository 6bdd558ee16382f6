#!/usr/bin/env python3
"""Clean text from a few free Debian packages -> JSONL ({"text": ...} one document per line).

usage: extract.py SOURCE ROOT OUT.jsonl [--max-chars N]
  SOURCE  austen   r-cran-janeaustenr: six Jane Austen novels (R lazy-load DB), one doc per chapter
          web      sword-text-web: World English Bible (SWORD zText, OSIS), one doc per chapter
          gcide    dict-gcide: GNU Collaborative International Dictionary of English (Webster 1913
                   + additions), consecutive entries grouped into documents of ~3,000 characters
          pydoc    python3.11-doc: reStructuredText sources of the Python docs, cleaned of markup,
                   split into documents of ~6,000 characters at paragraph boundaries
          wordnet  wordnet-base: WordNet 3.0 glosses ("word, word: gloss"), grouped per lexicographer
                   file into documents of ~2,500 characters
  ROOT    the package's extracted tree (dpkg-deb -x PACKAGE.deb ROOT)
  --max-chars N  keep an evenly spaced subset of the documents totalling about N characters
Prints "SOURCE: D docs, C chars" to stderr. Python 3 standard library only.
"""
import gzip
import json
import os
import re
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdata  # noqa: E402


def squeeze(text):
    """Normalise whitespace: no trailing spaces, at most one blank line, stripped."""
    text = text.replace('\r\n', '\n').replace('\r', '\n').replace('\u00a0', ' ')
    text = re.sub(r'[ \t]+\n', '\n', text)
    text = re.sub(r'\n{3,}', '\n\n', text)
    return text.strip()


def unwrap(lines):
    """Hard-wrapped lines -> paragraphs (one line each), separated by blank lines."""
    paras, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(' '.join(cur))
            cur = []
    if cur:
        paras.append(' '.join(cur))
    return '\n\n'.join(paras)


def group(pieces, target):
    """Concatenates consecutive pieces (blank line between) into documents of >= target chars."""
    doc, size = [], 0
    for p in pieces:
        doc.append(p)
        size += len(p) + 2
        if size >= target:
            yield '\n\n'.join(doc)
            doc, size = [], 0
    if doc:
        yield '\n\n'.join(doc)


# ---- Jane Austen ------------------------------------------------------------------------------
CHAPTER = re.compile(r'^\s*chapter\s+([0-9]+|[ivxlc]+)\.?\s*$', re.I)
VOLUME = re.compile(r'^\s*volume\s+([0-9]+|[ivxlc]+)\.?\s*$', re.I)
TITLES = {'emma': 'Emma', 'mansfieldpark': 'Mansfield Park', 'northangerabbey': 'Northanger Abbey',
          'persuasion': 'Persuasion', 'prideprejudice': 'Pride and Prejudice',
          'sensesensibility': 'Sense and Sensibility'}


def austen(root):
    d = os.path.join(root, 'usr/lib/R/site-library/janeaustenr/data')
    for name, lines in rdata.character_vectors(os.path.join(d, 'Rdata.rdx'), os.path.join(d, 'Rdata.rdb')):
        title = TITLES.get(name, name)
        chapters, cur, head = [], [], None
        for line in lines:
            m = CHAPTER.match(line)
            if m:
                if head is not None:
                    chapters.append((head, cur))
                head, cur = 'Chapter ' + m.group(1), []
            elif head is not None and not VOLUME.match(line):
                cur.append(line)
        if head is not None:
            chapters.append((head, cur))
        for head, body in chapters:
            text = unwrap(body)
            if text:
                yield f'{title}\n\n{head}\n\n{text}'


# ---- World English Bible (SWORD zText module, OSIS markup) -------------------------------------
def web(root):
    mod = os.path.join(root, 'usr/share/sword/modules/texts/ztext/engWEB2015eb')
    markup = []
    for testament in ('ot', 'nt'):
        bzs = os.path.join(mod, testament + '.bzs')
        if not os.path.exists(bzs):
            continue
        index = open(bzs, 'rb').read()
        blob = open(os.path.join(mod, testament + '.bzz'), 'rb').read()
        for i in range(0, len(index) - 11, 12):  # (offset, compressed size, size) per block
            off, size, _ = struct.unpack('<III', index[i:i + 12])
            if size:
                markup.append(zlib.decompress(blob[off:off + size]).decode('utf-8', 'replace'))
    osis = ''.join(markup)
    book = None
    # Split at chapter start milestones; remember the current book's short title.
    parts = re.split(r'(<chapter\b[^>]*\bsID="[^"]*"[^>]*/>)', osis)
    for k in range(0, len(parts), 2):
        body = parts[k]
        for m in re.finditer(r'<milestone\b[^>]*\bn="([^"]*)"[^>]*type="x-usfm-h"', body):
            book = m.group(1)
        if k == 0:
            continue
        n = re.search(r'\bn="([^"]*)"', parts[k - 1])
        # Text before the next book's heading belongs to this chapter; the heading starts the next.
        body = re.split(r'<div\b[^>]*type="book"', body)[0]
        text = osis_text(body)
        if text:
            yield f'{book} chapter {n.group(1) if n else "?"}\n\n{text}'


def osis_text(x):
    x = re.sub(r'<note\b.*?</note>', ' ', x, flags=re.S)
    x = re.sub(r'<title\b[^>]*>(.*?)</title>', lambda m: '\n\n' + m.group(1) + '\n\n', x, flags=re.S)
    x = re.sub(r'<div\b[^>]*type="x-p"[^>]*/>|</?lg\b[^>]*>|<p\b[^>]*>|</p>', '\n\n', x)
    x = re.sub(r'<l\b[^>]*\beID=[^>]*/>|</l>', '\n', x)
    x = re.sub(r'<[^>]+>', '', x)
    x = x.replace('&lt;', '<').replace('&gt;', '>').replace('&quot;', '"').replace('&amp;', '&')
    x = re.sub(r'[ \t]+', ' ', x)
    x = re.sub(r' ([,.;:!?\u2019\u201d)])', r'\1', x)  # the space a removed note left before punctuation
    x = re.sub(r' *\n *', '\n', x)
    return squeeze(x)


# ---- GCIDE ------------------------------------------------------------------------------------
B64 = {c: i for i, c in enumerate('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/')}
SOURCE_TAG = re.compile(r'^\s*\[(?:[^\]]*(?:Webster|PJC|WordNet|Century|Chambers|AS|RN|MW|NIH|Cath|CIA|DOE|Bouvier|F\.O\.C|prob\. AS|Mead)[^\]]*)\]\s*$')


def dictd_number(s):
    n = 0
    for ch in s:
        n = n * 64 + B64[ch]
    return n


def gcide(root):
    d = os.path.join(root, 'usr/share/dictd')
    data = gzip.open(os.path.join(d, 'gcide.dict.dz')).read()
    spans = {}
    with open(os.path.join(d, 'gcide.index'), encoding='utf-8', errors='replace') as f:
        for line in f:
            parts = line.rstrip('\n').split('\t')
            if len(parts) != 3 or parts[0].startswith('00'):
                continue  # 00-database-* entries: licence text and metadata
            off, ln = dictd_number(parts[1]), dictd_number(parts[2])
            spans[off] = max(ln, spans.get(off, 0))
    entries = []
    for off in sorted(spans):
        t = data[off:off + spans[off]].decode('utf-8', 'replace')
        lines = [ln for ln in t.split('\n') if not SOURCE_TAG.match(ln)]
        t = '\n'.join(ln.rstrip() for ln in lines)
        t = re.sub(r'[{}]', '', t)  # cross-reference braces
        # Pronunciations whose IPA letters the dictd build replaced by '?': "(kr?p"t?-gr?m)".
        t = re.sub(r' ?\((?=[^()\s]*\?)[^()\s]+\)', '', t)
        t = squeeze(t)
        if t:
            entries.append(t)
    yield from group(entries, 3000)


# ---- Python documentation (reStructuredText sources) -----------------------------------------
DROP_DIRECTIVES = ('index', 'module', 'currentmodule', 'moduleauthor', 'sectionauthor', 'highlight',
                   'toctree', 'testsetup', 'testcleanup', 'tabularcolumns', 'only', 'raw', 'include',
                   'literalinclude', 'productionlist', 'audit-event', 'impl-detail', 'availability',
                   'image', 'figure', 'csv-table', 'list-table', 'rubric', 'contents', 'sidebar')
ROLE = re.compile(r':[\w:+-]+:`([^`]*)`')
UNDERLINE = re.compile(r'^([=\-~^"\'`#*+.:_])\1{2,}\s*$')


def role_text(m):
    t = m.group(1).lstrip('!~')
    t = re.sub(r'\s*<[^>]*>$', '', t)  # "title <target>" -> title
    return t


def rst_to_text(src):
    out, skip_indent = [], None
    for line in src.split('\n'):
        if skip_indent is not None:
            if not line.strip() or (len(line) - len(line.lstrip())) > skip_indent:
                continue
            skip_indent = None
        m = re.match(r'^(\s*)\.\. ([\w:-]+)::\s*(.*)$', line)
        if m:
            indent, name, arg = len(m.group(1)), m.group(2), m.group(3)
            if name in DROP_DIRECTIVES:
                skip_indent = indent
                continue
            if name in ('note', 'warning', 'seealso', 'hint', 'important', 'tip', 'caution', 'attention'):
                out.append(m.group(1) + name.capitalize() + ': ' + arg)
            elif name in ('versionadded', 'versionchanged', 'deprecated', 'deprecated-removed'):
                words = {'versionadded': 'New in version', 'versionchanged': 'Changed in version',
                         'deprecated': 'Deprecated since version', 'deprecated-removed': 'Deprecated since version'}
                out.append(m.group(1) + words[name] + ' ' + arg + '.')
            elif name in ('code-block', 'sourcecode', 'doctest', 'testcode', 'testoutput', 'code'):
                out.append('')
            else:  # function/class/method/... signatures and anything else: keep the argument
                if arg:
                    out.append(m.group(1) + arg)
            continue
        if re.match(r'^\s*\.\. _[^:]*:\s*$', line) or re.match(r'^\s*\.\.\s*$', line) or re.match(r'^\s*\.\. \|', line):
            continue  # link targets, comments, substitutions
        if re.match(r'^\s*\.\. [^ ]', line) and '::' not in line:
            skip_indent = len(line) - len(line.lstrip())  # comment block
            continue
        if UNDERLINE.match(line):
            continue
        if re.match(r'^\s+:[\w-]+:( |$)', line) and out and not out[-1].strip() == '':
            continue  # directive options such as :synopsis:
        line = ROLE.sub(role_text, line)
        line = re.sub(r'``([^`]+)``', r'`\1`', line)
        line = re.sub(r'`([^`<]+?) <[^>`]+>`_+', r'\1', line)
        line = re.sub(r'\*\*([^*]+)\*\*', r'\1', line)
        line = re.sub(r'(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])', r'\1', line)
        if line.rstrip().endswith('::'):
            line = line.rstrip()[:-1] if not line.strip() == '::' else ''
        out.append(line.rstrip())
    return squeeze('\n'.join(out))


def pydoc(root):
    base = os.path.join(root, 'usr/share/doc/python3.11/html/_sources')
    files = []
    for d, _, names in os.walk(base):
        files += [os.path.join(d, n) for n in names if n.endswith('.rst.txt')]
    for path in sorted(files):
        rel = os.path.relpath(path, base)
        if rel.startswith(('whatsnew/changelog', 'license', 'copyright', 'bugs', 'about', 'contents')):
            continue
        text = rst_to_text(open(path, encoding='utf-8', errors='replace').read())
        paras = [p for p in text.split('\n\n') if p.strip()]
        yield from group(paras, 6000)


# ---- WordNet glosses -------------------------------------------------------------------------
def wordnet(root):
    d = os.path.join(root, 'usr/share/wordnet')
    for pos in ('noun', 'verb', 'adj', 'adv'):
        per_lexfile = {}
        with open(os.path.join(d, 'data.' + pos), encoding='utf-8', errors='replace') as f:
            for line in f:
                if line.startswith('  ') or ' | ' not in line:
                    continue  # licence header
                head, gloss = line.split(' | ', 1)
                fields = head.split()
                lexfile, count = fields[1], int(fields[3], 16)
                words = [re.sub(r'\([a-z]+\)$', '', fields[4 + 2 * i]).replace('_', ' ') for i in range(count)]
                per_lexfile.setdefault(lexfile, []).append(', '.join(words) + ': ' + gloss.strip())
        for lexfile in sorted(per_lexfile):
            for doc in group(per_lexfile[lexfile], 2500):
                yield doc.replace('\n\n', '\n')


SOURCES = {'austen': austen, 'web': web, 'gcide': gcide, 'pydoc': pydoc, 'wordnet': wordnet}


def evenly(docs, max_chars):
    """An evenly spaced subset of docs with about max_chars characters in total."""
    total = sum(len(d) for d in docs)
    if max_chars is None or total <= max_chars:
        return docs
    out, acc, budget = [], 0, 0.0
    for d in docs:
        budget += len(d) * max_chars / total
        if budget >= acc + len(d) / 2:
            out.append(d)
            acc += len(d)
    return out


def main(argv):
    if len(argv) < 4 or argv[1] not in SOURCES:
        sys.exit(__doc__)
    source, root, out = argv[1], argv[2], argv[3]
    max_chars = None
    if len(argv) >= 6 and argv[4] == '--max-chars':
        max_chars = int(argv[5])
    docs = [d for d in (squeeze(x) for x in SOURCES[source](root)) if d]
    docs = evenly(docs, max_chars)
    with open(out + '.part', 'w', encoding='utf-8') as f:
        for d in docs:
            f.write(json.dumps({'text': d}, ensure_ascii=False) + '\n')
    os.replace(out + '.part', out)
    print(f'{source}: {len(docs)} docs, {sum(len(d) for d in docs)} chars', file=sys.stderr)


if __name__ == '__main__':
    main(sys.argv)
