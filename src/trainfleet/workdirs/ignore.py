"""Which files of a job's directory stay behind: ``.gitignore`` files, as git reads them
(a deeper file's rules win), and ``.trainfleetignore`` in the same syntax.

>>> rules = IgnoreRules.empty().below("", ["*.ckpt", "!best.ckpt", "data/"])
>>> [rules.ignored(p, d) for p, d in [("a.ckpt", False), ("best.ckpt", False), ("data", True)]]
[True, False, True]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

from trainfleet.domain.errors import BadInput

IGNORE_FILES = (".gitignore", ".trainfleetignore")
ALWAYS = ("/.git/",)
"""Never sent: git's own folder."""


class BadIgnoreFile(BadInput):
    """An ignore file holds a pattern git could not read; the message names file and line."""


@dataclass(frozen=True)
class IgnoreRules:
    """The rules of the ignore files from the top folder down to one folder."""

    specs: tuple[tuple[str, GitIgnoreSpec], ...]
    """Each folder's rules (the folder relative to the top, "" for the top), top first."""

    @classmethod
    def empty(cls) -> IgnoreRules:
        return cls((("", GitIgnoreSpec.from_lines(ALWAYS)),))

    def below(self, folder: str, lines: Sequence[str]) -> IgnoreRules:
        """These rules and those of ``folder``'s ignore files (``lines``)."""
        return IgnoreRules((*self.specs, (folder, GitIgnoreSpec.from_lines(lines))))

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether ``path`` (relative to the top, ``/``-separated) stays behind."""
        verdict = False
        for folder, spec in self.specs:
            if folder and not path.startswith(folder + "/"):
                continue
            relative = path[len(folder) + 1 :] if folder else path
            result = spec.check_file(relative + "/" if is_dir else relative)
            if result.include is not None:
                verdict = result.include
        return verdict


def read_rules(directory: Path, relative: str, rules: IgnoreRules) -> IgnoreRules:
    """``rules`` and those of the ignore files in ``directory`` (``relative`` to the top).

    Raises BadIgnoreFile naming the file and line of a pattern git could not read.
    """
    lines: list[str] = []
    for name in IGNORE_FILES:
        path = directory / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(text, 1):
            try:
                GitIgnoreSpec.from_lines([line])
            except ValueError as error:
                shown = f"{relative}/{name}" if relative else name
                raise BadIgnoreFile(f"{shown}:{number}: {error}") from None
        lines += text
    return rules.below(relative, lines) if lines else rules
