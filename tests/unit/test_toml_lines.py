"""bench.hosts.toml_lines finds the line a key is written on (tomllib gives lines for syntax
errors only): headers, dotted and quoted keys, arrays of tables, multi-line strings and arrays
that look like keys, inline tables (the enclosing key's line); and, over documents tomli_w
writes from random nested tables, every key's line is the line that writes it."""

from __future__ import annotations

import tomllib

import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from bench.hosts.toml_lines import key_lines, line_of

DOC = '''# a host
name = "h1"
"quoted key" = 1
ssh.identity_file = "~/.ssh/id"
notes = """
fake = "not a key"
[not.a.table]
"""
command = [
  "x = 1",
]
[reboot]
method = "kexec"
inline = { a = 1, b = 2 }
[ 'paths' ]
pool_dir = "/p"
[[cells.extra]]
cell = "a"
'''


def test_lines_of_a_hand_written_document():
    tomllib.loads(DOC)          # valid TOML: the module reads documents that parsed
    lines = key_lines(DOC)
    assert line_of(lines, ("name",)) == 2
    assert line_of(lines, ("quoted key",)) == 3
    assert line_of(lines, ("ssh", "identity_file")) == 4
    assert line_of(lines, ("ssh", "identity_file", "deeper")) == 4
    assert line_of(lines, ("notes",)) == 5
    assert ("fake",) not in lines and ("not", "a", "table") not in lines
    assert ("x",) not in lines and line_of(lines, ("command", 0)) == 9
    assert line_of(lines, ("reboot",)) == 12
    assert line_of(lines, ("reboot", "method")) == 13
    assert line_of(lines, ("reboot", "inline", "b")) == 14      # inside an inline table
    assert line_of(lines, ("reboot", "missing")) == 12           # the table that misses it
    assert line_of(lines, ("paths", "pool_dir")) == 16
    assert line_of(lines, ("cells", "extra", 0, "cell")) == 18
    assert line_of(lines, ("nowhere",)) is None


names = st.text(alphabet="abcdefghij_-", min_size=1, max_size=6)
values = st.one_of(st.integers(), st.text(max_size=20), st.booleans(),
                   st.lists(st.integers(), max_size=3))
tables = st.recursive(st.dictionaries(names, values, min_size=1, max_size=4),
                      lambda inner: st.dictionaries(names, st.one_of(values, inner),
                                                    min_size=1, max_size=4), max_leaves=12)


def _leaves(d: dict, path: tuple = ()):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _leaves(v, path + (k,))
        else:
            yield path + (k,)


@given(tables)
def test_every_key_tomli_w_writes_is_found_on_its_line(doc):
    text = tomli_w.dumps(doc, multiline_strings=True)
    lines = key_lines(text)
    written = text.split("\n")
    for path in _leaves(doc):
        n = line_of(lines, path)
        assert n is not None and path in lines, (path, text)
        assert written[n - 1].lstrip().startswith((path[-1], f'"{path[-1]}"')), (path, text)


def test_triple_quotes_inside_a_one_line_string_open_nothing():
    doc = 'a = "x\'\'\'y"\nb = 1\nc = """one line"""\nd = 2\n'
    assert tomllib.loads(doc) and key_lines(doc) == {("a",): 1, ("b",): 2, ("c",): 3, ("d",): 4}
