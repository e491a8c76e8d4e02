"""The README and docs/ stay true to the code they show.

Every ```python block of README.md, BENCHMARKS.md and docs/*.md compiles; a block that says
"runs as-is in tests/project/test_docs.py" is self-contained and cheap, and runs.  The other blocks are
sketches around a user's model, data and optimizer (``model``, ``loss_fn``, ``strategy``): compiling
is all that can be checked without them.  Every relative link (and its #anchor, for a Markdown
file) points at something that exists; every ``tb-gradlens SUB`` / ``python -m tb_gradlens SUB``
in a ```bash block names a subcommand the CLI has (``SUB --help`` exits 0), and every
``python path/to/script.py`` there names a script that exists.  The README stays short.

The checkers are plain functions of the text, and the ``test_checker_*`` tests feed each one a
broken document: a check that cannot fail checks nothing.
"""

import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README_MAX_LINES = 260
RUNS_MARK = "runs as-is in tests/project/test_docs.py"


def doc_files():
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "BENCHMARKS.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return files


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def rel(path):
    return os.path.relpath(path, ROOT)


FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def code_blocks(text, language):
    """[(first line number of the code, source)] of the fenced blocks in that language."""
    return [
        (text.count("\n", 0, m.start(2)) + 1, m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == language
    ]


def prose(text):
    """The text without fenced blocks and inline code spans (links there are not links)."""
    text = FENCE.sub("", text)
    return re.sub(r"`[^`]*`", "", text)


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", FENCE.sub("", text), re.M)}


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def broken_links(path, text):
    """Relative links of a Markdown file (at path) whose file or anchor does not exist."""
    broken = []
    for target in LINK.findall(prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        where = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(where):
            broken.append(target)
        elif anchor and where.endswith(".md"):
            if anchor not in anchors(text if where == path else read(where)):
                broken.append(target)
    return broken


CLI = re.compile(r"(?:^|&&|;|\|)\s*(?:tb-gradlens|python3? -m tb_gradlens)\s+([^\s|&;]+)")
SCRIPT = re.compile(r"(?:^|&&|;)\s*python3? ((?:benchmarks|tests)/\S+\.py)")


def cli_subcommands(bash):
    return {m.group(1) for line in bash.splitlines() for m in CLI.finditer(line)}


def scripts(bash):
    return {m.group(1) for line in bash.splitlines() for m in SCRIPT.finditer(line)}


# ---------------------------------------------------------------------------
# The checks on the repository's documents.
# ---------------------------------------------------------------------------


def python_blocks():
    return [
        pytest.param(src, id="%s:%d" % (rel(path), line))
        for path in doc_files()
        for line, src in code_blocks(read(path), "python")
    ]


@pytest.mark.parametrize("src", python_blocks())
def test_python_block_compiles(src):
    compile(src, "<doc block>", "exec")


def test_runnable_blocks_run():
    runnable = [(path, line, src) for path in doc_files() for line, src in code_blocks(read(path), "python")
                if RUNS_MARK in src]
    assert runnable, "no block is marked %r" % RUNS_MARK
    for path, line, src in runnable:
        done = subprocess.run([sys.executable, "-c", src], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        assert done.returncode == 0, "%s:%d:\n%s" % (rel(path), line, done.stderr[-2000:])


def test_relative_links_exist():
    broken = {rel(path): broken_links(path, read(path)) for path in doc_files()}
    assert {k: v for k, v in broken.items() if v} == {}


def test_every_doc_is_linked():
    """Each file under docs/ is reachable: some document links to it."""
    linked = set()
    for path in doc_files():
        for target in LINK.findall(prose(read(path))):
            linked.add(os.path.normpath(os.path.join(os.path.dirname(path), target.partition("#")[0])))
    docs = [p for p in doc_files() if os.path.dirname(p) == os.path.join(ROOT, "docs")]
    assert [rel(p) for p in docs if p not in linked] == []


def test_cli_commands_in_bash_blocks_are_real():
    subs, paths = set(), set()
    for path in doc_files():
        for _, src in code_blocks(read(path), "bash"):
            subs |= cli_subcommands(src)
            paths |= scripts(src)
    assert {"report", "compare", "export", "advise", "demo"} <= subs
    for sub in sorted(subs):
        done = subprocess.run([sys.executable, "-m", "tb_gradlens", sub, "--help"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        assert done.returncode == 0, "%s --help: %s" % (sub, done.stderr[-1000:])
    assert [p for p in sorted(paths) if not os.path.exists(os.path.join(ROOT, p))] == []


def test_readme_is_short():
    lines = read(os.path.join(ROOT, "README.md")).count("\n")
    assert lines <= README_MAX_LINES, "README.md has %d lines; reference material goes under docs/" % lines


def test_quick_start_commands():
    readme = read(os.path.join(ROOT, "README.md"))
    blocks = [src.strip() for _, src in code_blocks(readme, "bash")]
    assert blocks[:2] == ['pip install ".[demo]" && python -m tb_gradlens demo', "bash .ci/run"]


# ---------------------------------------------------------------------------
# The checkers fail on broken documents.
# ---------------------------------------------------------------------------


def test_checker_finds_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    text = ("# Title\n\n[ok](there.md) [ok](there.md#a-heading) [ok](#title) [web](https://example.com)\n"
            "[gone](missing.md) [bad anchor](there.md#nowhere) ![img](no.png) `[code](x.md)`\n"
            "```bash\n[block](y.md)\n```\n")
    page.write_text(text)
    assert broken_links(str(page), text) == ["missing.md", "there.md#nowhere", "no.png"]


def test_checker_finds_python_that_does_not_compile():
    text = "x\n```python\nfor x in y:\n    pass\n```\n\n```python\nbreak\n```\n"
    blocks = code_blocks(text, "python")
    assert [line for line, _ in blocks] == [3, 8]
    compile(blocks[0][1], "<ok>", "exec")
    with pytest.raises(SyntaxError):
        compile(blocks[1][1], "<bad>", "exec")


def test_checker_finds_a_subcommand_that_does_not_exist():
    bash = ('pip install ".[demo]" && python -m tb_gradlens demo\n'
            "tb-gradlens reprot LOGDIR [--json]\n"
            "                    [--row VARIABLE]\n"
            "python benchmarks/run.py --tiny\n")
    assert cli_subcommands(bash) == {"demo", "reprot"}
    assert scripts(bash) == {"benchmarks/run.py"}
    done = subprocess.run([sys.executable, "-m", "tb_gradlens", "reprot", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
