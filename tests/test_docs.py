"""The documentation site: it builds without a warning, its links resolve, the API
reference documents every public name, and every code block of README.md and
docs/ runs.

The site tests skip when MkDocs is not installed (the ``docs`` extra, which the
``test`` extra includes, so CI runs them).

**Code blocks.** Every fenced block of README.md and docs/**/*.md declares a
language. ``text`` blocks (directory layouts, output, usage lines) are not
code. ``python`` blocks of a page run in order in one namespace, in a
temporary directory. ``sh``/``bash`` blocks run line by line (``#`` comments
dropped, ``&&`` splitting commands); each command must be ``ember-np ...`` or
``python -m ember_np ...`` and runs in-process through :func:`ember_np.cli.main`
in the page's temporary directory, which must return 0, with these changes so
the examples cost a few hundred steps, not minutes:

- ``train`` gets ``--steps 200 --eval-episodes 2 --quiet``; ``resume`` gets
  ``--quiet``, and ``--steps 400`` (past the trained 200) where it has ``--steps``;
- a ``<time>`` in a path becomes the newest run directory matching it.

HTML comments on the lines right above a block steer it, visibly in the page's
source:

- ``<!-- docs-test: skip: REASON -->``: not run (a server that runs until
  interrupted, a cluster, installs); counted and listed with its reason;
- ``<!-- docs-test: skip-install -->``: the block's ``pip install`` commands
  are not run (counted); the rest of the block is;
- ``<!-- docs-test: replace "OLD" "NEW" ... -->``: text replaced before the
  block runs (smaller budgets, seed counts, worker counts).

A home-made runner (about 100 lines) rather than pytest-markdown-docs or
mktestdocs: neither runs shell blocks, neither counts the blocks it did not
run, and the CLI commands run in-process here, which reuses the worker's loaded
kernels (a subprocess would pay ~1.5 s of CPU per command to start numba).
"""

from __future__ import annotations

import contextlib
import html.parser
import importlib
import io
import os
import pkgutil
import posixpath
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])
CODE = {"python", "sh", "bash"}
NOT_CODE = {"text", "mermaid"}  # mermaid: a diagram the site draws
FENCE = re.compile(r"^```(\S*)[ \t]*$")
DIRECTIVE = re.compile(r"^<!-- docs-test: (.*?) -->$")


# ---------------------------------------------------------------- code blocks


@dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str
    skip: str | None = None
    skip_install: bool = False
    replace: list[tuple[str, str]] = field(default_factory=list)

    def name(self) -> str:
        return f"{self.page}:{self.line} ({self.lang})"


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of a page (snippet lines ``--8<--`` are not fences)."""
    lines = path.read_text().splitlines()
    rel = path.relative_to(ROOT).as_posix()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        block = Block(rel, i + 1, match.group(1), "\n".join(lines[i + 1 : end]))
        j = i - 1
        while j >= 0 and lines[j].startswith("<!--"):  # the comments right above
            directive = DIRECTIVE.match(lines[j])
            if directive:
                apply_directive(block, directive.group(1))
            j -= 1
        found.append(block)
        i = end + 1
    return found


def apply_directive(block: Block, text: str) -> None:
    if text.startswith("skip:"):
        block.skip = text.removeprefix("skip:").strip()
        assert block.skip, f"{block.name()}: a skip needs a reason"
    elif text == "skip-install":
        block.skip_install = True
    elif text.startswith("replace "):
        words = shlex.split(text.removeprefix("replace "))
        assert len(words) % 2 == 0, f"{block.name()}: replace takes OLD NEW pairs"
        block.replace += list(zip(words[::2], words[1::2]))
    else:
        raise AssertionError(f"{block.name()}: unknown docs-test directive {text!r}")


def prepared(block: Block) -> str:
    code = block.code
    for old, new in block.replace:
        assert old in code, f"{block.name()}: replace {old!r}: not in the block"
        code = code.replace(old, new)
    return code


def newest(pattern: str) -> str:
    matches = sorted(Path().glob(pattern.replace("<time>", "*")), key=os.path.getmtime)
    assert matches, f"no run directory matches {pattern}"
    return str(matches[-1])


def cli_args(command: str) -> list[str]:
    words = shlex.split(command)
    if words[:1] == ["ember-np"]:
        args = words[1:]
    elif words[:3] == ["python", "-m", "ember_np"]:
        args = words[3:]
    else:
        raise AssertionError(f"not an ember-np command: {command!r}; mark its block skip")
    args = [newest(a) if "<time>" in a else a for a in args]
    if args and args[0] in ("train", "resume"):
        if "--steps" in args:
            args[args.index("--steps") + 1] = "200" if args[0] == "train" else "400"
        elif args[0] == "train":
            args += ["--steps", "200"]
        args.append("--quiet")
        if args[0] == "train" and "--eval-episodes" not in args:
            args += ["--eval-episodes", "2"]
    return args


def run_shell(block: Block, log: list[str]) -> None:
    from ember_np.cli import main

    for line in prepared(block).splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for command in (c.strip() for c in line.split("&&")):
            if block.skip_install and re.match(r"(python -m )?pip install ", command):
                log.append(f"  not run (install): {command}")
                continue
            args = cli_args(command)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(args)
            assert status in (0, None), f"{block.name()}: {args} -> {status}\n{err.getvalue()}"
            log.append(f"  ran: ember-np {shlex.join(args)}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_code_block_of_the_page_runs(page, tmp_path, monkeypatch, capsys):
    """Run the page's blocks; the count of run and skipped blocks must be the
    count of code blocks, and the list of what ran is printed (``-s`` shows it)."""
    blocks = [b for b in blocks_of(page) if b.lang in CODE]
    if not blocks:
        pytest.skip("no code blocks")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    ran, skipped, log = [], [], []
    for block in blocks:
        if block.skip:
            skipped.append(block)
            log.append(f"skipped {block.name()}: {block.skip}")
            continue
        log.append(f"ran {block.name()}")
        if block.lang == "python":
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(prepared(block), block.name(), "exec"), namespace)
        else:
            run_shell(block, log)
        ran.append(block)
    assert len(ran) + len(skipped) == len(blocks)
    with capsys.disabled():
        print(f"\n{page.relative_to(ROOT)}: {len(ran)} run, {len(skipped)} skipped")
        print("\n".join(log))


def test_every_block_declares_what_it_is():
    """A fence without a language, or with one the runner does not know, fails:
    a page cannot add a block that silently goes unrun."""
    counts = {"run": 0, "skipped": 0, "text": 0}
    bad = []
    for page in PAGES:
        for block in blocks_of(page):
            if block.lang in NOT_CODE:
                counts["text"] += 1
            elif block.lang not in CODE:
                bad.append(block.name())
            else:
                counts["skipped" if block.skip else "run"] += 1
    assert not bad, f"blocks with no language or an unknown one (use text, python, sh): {bad}"
    print(f"code blocks: {counts}")
    assert counts["run"] > counts["skipped"]


#: A Markdown link's target: ``[text](target)``.
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md"])
def test_every_relative_link_of_a_top_level_page_names_a_file(page):
    """README.md and CONTRIBUTING.md are read in the repository, not on the site (whose
    links the site tests check): each relative link names a file of the checkout."""
    targets = [m.group(1) for m in MARKDOWN_LINK.finditer((ROOT / page).read_text())]
    relative = [t for t in targets if not urlsplit(t).scheme and not t.startswith("#")]
    assert relative, f"{page} has no relative link (the pattern finds none?)"
    missing = [t for t in relative if not (ROOT / unquote(urlsplit(t).path)).exists()]
    assert not missing, f"{page} links to files the checkout lacks: {missing}"


# ------------------------------------------------- pages that read as documentation

#: The project's own tracker, cited as "issue 26" / "Issue 26's" / "issues 14 and 26": a
#: reader has no such issues. Not preceded by "/" or a word character, so a link to another
#: project's tracker (``github.com/o/r/issues/12``) is not a citation.
INTERNAL_ISSUE = re.compile(r"(?<![/\w])issues?\s+#?\d+", re.I)
#: A "bar" in the sense of an internal acceptance target ("bar 0.2 s: met", "issue 14's
#: bars", "(bar: >= 1.3x)"). A progress bar, an error bar or a bar chart is not one.
INTERNAL_BAR = re.compile(r"(?<!progress )(?<!error )\bbars?\b(?! charts?\b)", re.I)
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)


def reader_facing_text(page: Path) -> str:
    """The page's Markdown with the files its ``--8<--`` lines include in their place
    (they show on the site as part of the page)."""
    text = page.read_text()
    return SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), text)


def test_internal_references_pattern_is_precise():
    """The patterns catch the project's internal citations and nothing else."""
    cited = ["Issue 25's bars, as measured here", "issue 26's bar, >= -72, met",
             "(bar 0.2 s: met)", "bar (issue 14)", "Bars: S1 >= 20x", "issues 14 and 26",
             "the 60 s bar of `--seeds 20`", "issue #7"]  # fmt: skip
    fine = ["a progress bar", "error bars", "a bar chart", "barrier", "crowbar",
            "https://github.com/numba/numba/issues/4321", "tissue 3", "foobar"]  # fmt: skip
    for text in cited:
        assert INTERNAL_ISSUE.search(text) or INTERNAL_BAR.search(text), text
    for text in fine:
        assert not (INTERNAL_ISSUE.search(text) or INTERNAL_BAR.search(text)), text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_cites_no_internal_issue_or_bar(page):
    """A reader has no access to the project's issues and their acceptance bars: a
    figure stands on its own with its command and machine, and a limit is explained
    in the reader's terms. Included files (``--8<--``) count as part of the page."""
    found = []
    for number, line in enumerate(reader_facing_text(page).splitlines(), 1):
        for pattern in (INTERNAL_ISSUE, INTERNAL_BAR):
            found += [f"line {number}: {m.group(0)!r} in {line.strip()[:100]!r}"
                      for m in pattern.finditer(line)]  # fmt: skip
    assert not found, f"{page.relative_to(ROOT)} cites internal issues or bars:\n" + "\n".join(
        found
    )


# ---------------------------------------------------------------- the built site


def built_site(tmp: str) -> tuple[Path, str]:
    out = Path(tmp) / "site"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    return out, f"exit {result.returncode}\n{result.stdout}{result.stderr}"


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed")
    pytest.importorskip("material", reason="the docs extra is not installed")
    return built_site(str(tmp_path_factory.mktemp("docs")))


@pytest.mark.xdist_group("docs_site")
def test_mkdocs_build_strict_has_no_warning(site):
    out, log = site
    assert log.startswith("exit 0"), log
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert not warnings, "\n".join(warnings)
    assert (out / "index.html").is_file()


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and attrs.get("rel") == "canonical"):
                self.links.append(attrs[key])


def parse_site(out: Path) -> dict[str, _Page]:
    pages = {}
    for path in out.rglob("*.html"):
        parser = _Page()
        parser.feed(path.read_text())
        pages[path.relative_to(out).as_posix()] = parser
    return pages


@pytest.mark.xdist_group("docs_site")
def test_built_site_has_no_broken_internal_link(site):
    """Every relative href/src of every built page names a file of the site, and
    its #fragment an id on that page (html.parser over the built HTML: a few lines,
    no link-checker dependency, and it checks anchors, which MkDocs only checks
    in Markdown links)."""
    out, log = site
    assert log.startswith("exit 0"), log
    pages = parse_site(out)
    broken, checked = [], 0
    for name, page in pages.items():
        if name == "404.html":  # served at any depth, so MkDocs writes it with root-absolute links
            continue
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:")):
                continue
            target = name
            if parts.path:
                target = posixpath.normpath(
                    posixpath.join(posixpath.dirname(name), unquote(parts.path))
                )
                if (out / target).is_dir():
                    target = posixpath.join(target, "index.html")
                if not (out / target).is_file():
                    broken.append(f"{name}: {link}")
                    continue
            if (
                parts.fragment
                and target in pages
                and unquote(parts.fragment) not in pages[target].ids
            ):
                broken.append(f"{name}: {link} (no such anchor)")
            checked += 1
    assert checked > 1000
    assert not broken, "\n".join(broken)


class _Article(html.parser.HTMLParser):
    """The text of a built page's article (``md-content__inner``): its title
    (the ``h1``) apart from the rest; permalink marks (``a.headerlink``) dropped."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
            "source", "track", "wbr"}  # fmt: skip

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []  # per open element inside the article: "title", "skip" or ""
        self.title: list[str] = []
        self.body: list[str] = []

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if not self.stack:
            if tag == "article" and "md-content__inner" in classes:
                self.stack.append("")
            return
        if tag in self.VOID:
            return
        kind = "title" if tag == "h1" else "skip" if "headerlink" in classes else ""
        self.stack.append(kind)

    def handle_endtag(self, tag):
        if self.stack and tag not in self.VOID:
            self.stack.pop()

    def handle_data(self, data):
        if not self.stack or "skip" in self.stack:
            return
        (self.title if "title" in self.stack else self.body).append(data)


@pytest.mark.xdist_group("docs_site")
def test_every_page_of_the_site_has_text_beyond_its_title(site):
    """A page that shows its title and nothing else (as the home page once did:
    ``# index`` alone) fails: every built page's article holds at least a
    sentence's worth of words besides its ``h1``."""
    out, log = site
    assert log.startswith("exit 0"), log
    empty, counted = [], 0
    for path in sorted(out.rglob("*.html")):
        name = path.relative_to(out).as_posix()
        if name == "404.html":  # the theme's, not a page of docs/
            continue
        article = _Article()
        article.feed(path.read_text())
        words = " ".join(article.body).split()
        counted += 1
        if len(words) < 10:
            empty.append(
                f"{name}: title {' '.join(''.join(article.title).split())!r}, "
                f"then {len(words)} words: {' '.join(words)!r}"
            )
    assert counted >= len(list((ROOT / "docs").rglob("*.md")))
    assert not empty, "pages with no text beyond their title:\n" + "\n".join(empty)


def public_names() -> dict[str, list[str]]:
    """``ember_np.__all__`` and the ``__all__`` of every public module (no part of
    the dotted name starts with an underscore)."""
    import ember_np

    names = {"ember_np": list(ember_np.__all__)}
    for info in pkgutil.walk_packages(ember_np.__path__, "ember_np."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        module = importlib.import_module(info.name)
        if hasattr(module, "__all__"):
            names[info.name] = list(module.__all__)
    return names


@pytest.mark.xdist_group("docs_site")
def test_api_reference_documents_every_public_name(site):
    """Each public name has an entry (an anchor of the API pages) under its own
    module's path or under another module's path that holds the same object."""
    out, log = site
    assert log.startswith("exit 0"), log
    anchors = set()
    for page in parse_site(out / "api").values():
        anchors |= {i for i in page.ids if i.startswith("ember_np")}
    by_name: dict[str, list[str]] = {}
    for anchor in anchors:
        by_name.setdefault(anchor.rsplit(".", 1)[-1], []).append(anchor)

    def documented(module_name: str, name: str) -> bool:
        obj = getattr(importlib.import_module(module_name), name)
        if f"{module_name}.{name}" in anchors or getattr(obj, "__name__", None) in anchors:
            return True
        for anchor in by_name.get(name, []):
            home = anchor.rsplit(".", 1)[0]
            with contextlib.suppress(ImportError):
                if getattr(importlib.import_module(home), name, None) is obj:
                    return True
        return False

    names = public_names()
    missing = [f"{m}.{n}" for m, ns in names.items() for n in ns if not documented(m, n)]
    total = sum(map(len, names.values()))
    print(f"{total} public names in {len(names)} modules; {total - len(missing)} documented")
    assert total > 300
    assert not missing, f"public names missing from the API reference: {missing}"


@pytest.mark.xdist_group("docs_site")
def test_cli_reference_lists_every_command_and_option(site):
    """The generated page has a section per subcommand holding each of its options."""
    from ember_np.cli import build_parser

    out, log = site
    assert log.startswith("exit 0"), log
    text = (out / "reference" / "cli" / "index.html").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    sections = re.split(r'<h2 id="ember-np-', text)[1:]
    assert [s.split('"', 1)[0] for s in sections] == list(sub.choices)
    for section, (name, command) in zip(sections, sub.choices.items()):
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"<code>{flag}</code>" in section, (name, flag)


@pytest.mark.xdist_group("docs_site")
def test_options_checkpoint_keys_and_learning_table_are_two_clicks_from_home(site):
    """Home -> the Reference tab is the CLI reference (every command's options);
    Reference -> Formats holds the checkpoint keys; the Results tab is the
    learning table."""
    out, log = site
    assert log.startswith("exit 0"), log
    home = (out / "index.html").read_text()
    tabs = dict(
        (label.strip(), href)
        for href, label in re.findall(
            r'<a href="([^"]+)" class="md-tabs__link">\s*([^<]+?)\s*</a>', home
        )
    )
    assert tabs["Reference"] == "reference/cli/" and tabs["Results"] == "results/learning/"
    cli = (out / "reference" / "cli" / "index.html").read_text()
    assert 'href="../formats/"' in cli and 'id="ember-np-train"' in cli
    formats = (out / "reference" / "formats" / "index.html").read_text()
    assert "<code>buffer/obs</code>" in formats and "<code>rng/explore</code>" in formats
    learning = (out / "results" / "learning" / "index.html").read_text()
    assert "ember_np rainbow (35,000)" in learning  # bench/results_learning.md's table


def test_the_readme_command_runs_every_test():
    """``python -m pytest`` (the README's command) deselects nothing: pytest's addopts
    carry no ``-m``, ``-k``, ``--deselect`` or ``--ignore``, and nox's tests session
    (CI) passes pytest nothing but its own arguments, so both run the same tests."""
    options = (ROOT / "pyproject.toml").read_text()
    (addopts,) = re.findall(r"^addopts = (.*)$", options, re.M)
    words = shlex.split(addopts.strip().strip('"'))
    assert not [w for w in words if w in ("-m", "-k") or w.startswith(("--deselect", "--ignore"))]
    assert 'session.run("pytest", *session.posargs)' in (ROOT / "noxfile.py").read_text()
