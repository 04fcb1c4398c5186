"""Print the shell command in the README's fenced block after ``<!-- NAME -->``."""

import re
import sys
from pathlib import Path

name = sys.argv[1]
text = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text()
match = re.search(rf"<!-- {re.escape(name)} -->\s*```sh\n(.+?)\n```", text, re.S)
if not match or "\n" in match.group(1).strip():
    sys.exit(f"README.md has no single-line ```sh block after <!-- {name} -->")
print(match.group(1).strip())
