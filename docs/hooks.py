"""MkDocs hooks: pages made from the code, so they cannot drift from it.

- ``<!-- cli-reference -->`` in a page becomes the reference of every
  ``ember-np`` command, read from :func:`ember_np.cli.build_parser` (the parser
  the command line runs): usage, description and a table of its options.
- The figures that ``bench/`` scripts write (``bench/*.png``) are added to the
  site under the same path, so pages can show them without copies in ``docs/``.

(A hook rather than mkdocs-gen-files or a Markdown extension: MkDocs runs
hooks itself, so the CLI reference needs no plugin at all.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # document this checkout's code, wherever ember_np is installed
    sys.path.insert(0, str(ROOT))
MARKER = "<!-- cli-reference -->"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{s}`" for s in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    suffix = " ..." if action.nargs in ("+", "*") else ""
    return f"{names} `{metavar}{suffix}`"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return ""
    return f"`{action.default}`"


def command_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown: one section per subcommand of ``parser``, in the parser's order."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    out = []
    for name, command in sub.choices.items():
        out.append(f"## `ember-np {name}`\n")
        if helps.get(name):
            out.append(_cell(helps[name]) + "\n")
        if command.description:
            out.append(command.description.strip() + "\n")
        usage = command.format_usage().removeprefix("usage: ").strip()
        out.append(f"```text\n{usage}\n```\n")
        out.append("| argument | default | what |\n|---|---|---|")
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            what = "" if action.help in (None, argparse.SUPPRESS) else action.help
            if action.choices and action.option_strings and action.nargs != 0:
                what = (what + f" (one of {', '.join(map(str, action.choices))})").strip()
            out.append(f"| {_flags(action)} | {_default(action)} | {_cell(what)} |")
        out.append("")
        if command.epilog:
            out.append(command.epilog.strip() + "\n")
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    from ember_np.cli import build_parser

    return markdown.replace(MARKER, command_reference(build_parser()))


def on_files(files, config):
    for png in sorted((ROOT / "bench").glob("*.png")):
        path = f"bench/{png.name}"
        if files.get_file_from_path(path) is None:
            files.append(File(path, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
