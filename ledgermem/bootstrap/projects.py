"""The file-system scanner: project folders and the languages they are written in.

Only names are read: a folder is a project when it holds a marker (``.git``,
``pyproject.toml``, ``package.json``, ``Cargo.toml``…) or, under a code folder such as
``~/code``, source files; its languages come from the extensions of its file names.
No file is opened. Dependency, build and hidden folders are skipped, links are not
followed, and at most ``ScanOptions.max_files`` names are read per project.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..types import Finding
from .host import Found, Host, ScanOptions, shown_path

__all__ = ["LANGUAGES", "MARKERS", "Project", "find_projects", "languages_of", "listing",
           "project_folders", "scan_projects"]

MARKERS = frozenset({
    ".git", "pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "package.json",
    "Cargo.toml", "go.mod", "pom.xml", "build.gradle", "build.gradle.kts", "Gemfile",
    "composer.json", "CMakeLists.txt", "Makefile", "mix.exs", "deno.json", "pubspec.yaml",
    "Package.swift", "stack.yaml", "dune-project", "project.clj", "build.sbt", "flake.nix",
})
"""Names whose presence makes a folder a project."""

LANGUAGES = {
    ".py": "Python", ".pyi": "Python", ".ipynb": "Python", ".ts": "TypeScript",
    ".tsx": "TypeScript", ".js": "JavaScript", ".jsx": "JavaScript", ".mjs": "JavaScript",
    ".cjs": "JavaScript", ".rs": "Rust", ".go": "Go", ".java": "Java", ".kt": "Kotlin",
    ".kts": "Kotlin", ".scala": "Scala", ".rb": "Ruby", ".php": "PHP", ".c": "C",
    ".h": "C", ".cc": "C++", ".cpp": "C++", ".cxx": "C++", ".hpp": "C++", ".cs": "C#",
    ".fs": "F#", ".swift": "Swift", ".m": "Objective-C", ".mm": "Objective-C",
    ".hs": "Haskell", ".ex": "Elixir", ".exs": "Elixir", ".erl": "Erlang",
    ".clj": "Clojure", ".lua": "Lua", ".r": "R", ".jl": "Julia", ".dart": "Dart",
    ".sh": "Shell", ".bash": "Shell", ".zsh": "Shell", ".ps1": "PowerShell", ".sql": "SQL",
    ".vue": "Vue", ".svelte": "Svelte", ".zig": "Zig", ".nim": "Nim", ".ml": "OCaml",
    ".pl": "Perl", ".tf": "Terraform", ".sol": "Solidity", ".elm": "Elm", ".tex": "LaTeX",
}
"""File extension (lower case) → the language it is written in."""

SKIPPED = frozenset({
    "node_modules", "venv", "env", "__pycache__", "target", "build", "dist", "vendor",
    "site-packages", "bower_components", "Pods", "DerivedData", "out", "bin", "obj",
})
"""Folders holding dependencies or build output, not the project's own code."""

_CODE_DEPTH = 2
"""How deep projects are looked for under a code folder (``~/code/org/repo``)."""
_TREE_DEPTH = 8
_MIN_SHARE = 0.05
"""A language counts in a project when at least this share of its source files has it."""


@dataclass(frozen=True)
class Project:
    """A project folder: where it is, what marks it, its source files per language."""

    path: Path
    markers: tuple[str, ...]
    languages: tuple[tuple[str, int], ...]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def main_languages(self) -> list[str]:
        """Its languages, most files first, leaving out stray ones."""
        total = sum(count for _, count in self.languages)
        return [lang for lang, count in self.languages if count >= total * _MIN_SHARE][:3]


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as listing:
        return list(listing)


def _is_project(entries: list[os.DirEntry[str]], in_code_folder: bool) -> tuple[str, ...]:
    """The markers that make a folder a project (``("source files",)`` for a folder of
    source files under a code folder); empty when it is none."""
    names = sorted(entry.name for entry in entries if entry.name in MARKERS)
    if names:
        return tuple(names)
    if in_code_folder and any(entry.is_file(follow_symlinks=False)
                              and Path(entry.name).suffix.lower() in LANGUAGES
                              for entry in entries):
        return ("source files",)
    return ()


def find_projects(host: Host, options: ScanOptions, found: Found) -> list[Project]:
    """Project folders under the roots (each once): the home directory's children
    with a marker, and under a code folder its children (and their children, when a
    child is no project itself) with a marker or source files."""
    projects: dict[Path, Project] = {}
    for root in options.project_roots(host):
        in_code_folder = root != host.home.resolve()
        for path, markers in project_folders(host, root, in_code_folder, found):
            if path not in projects:
                projects[path] = Project(path, markers, languages_of(path, options, found))
    return list(projects.values())


def project_folders(host: Host, root: Path, in_code_folder: bool, found: Found
                    ) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """(folder, its markers) of the projects under ``root`` (see ``find_projects``);
    folders that cannot be listed are noted in ``found``."""
    todo = [(root, 0)]
    while todo:
        folder, depth = todo.pop(0)
        try:
            children = [e for e in _entries(folder) if e.is_dir(follow_symlinks=False)
                        and not e.name.startswith(".") and e.name not in SKIPPED]
        except OSError as exc:
            found.failed(shown_path(folder, host), exc)
            continue
        for child in sorted(children, key=lambda e: e.name):
            try:
                entries = _entries(Path(child.path))
            except OSError as exc:
                found.failed(shown_path(Path(child.path), host), exc)
                continue
            markers = _is_project(entries, in_code_folder)
            if markers:
                yield Path(child.path).resolve(), markers
            elif in_code_folder and depth + 1 < _CODE_DEPTH:
                todo.append((Path(child.path), depth + 1))


def languages_of(path: Path, options: ScanOptions, found: Found
                 ) -> tuple[tuple[str, int], ...]:
    """Source files per language under ``path``, most first, from file names alone."""
    counts: Counter[str] = Counter()
    seen = 0
    for folder, dirs, files in os.walk(path, onerror=lambda exc: found.failed(
            str(exc.filename or path), exc)):
        depth = Path(folder).relative_to(path).parts
        dirs[:] = [] if len(depth) >= _TREE_DEPTH else sorted(
            d for d in dirs if not d.startswith(".") and d not in SKIPPED)
        for name in files:
            seen += 1
            language = LANGUAGES.get(Path(name).suffix.lower())
            if language:
                counts[language] += 1
        if seen >= options.max_files:
            break
    return tuple(sorted(counts.items(), key=lambda pair: (-pair[1], pair[0])))


def listing(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(words) <= 1:
        return "".join(words)
    return f"{', '.join(words[:-1])} and {words[-1]}"


def scan_projects(host: Host, options: ScanOptions) -> Found:
    """Findings: one per project folder (its name, place and languages), and one per
    language the projects are written in (a skill, with the projects that use it)."""
    found = Found()
    projects = find_projects(host, options, found)
    by_language: dict[str, list[str]] = {}
    for project in projects:
        where = shown_path(project.path, host)
        languages = project.main_languages
        written = f", written mostly in {listing(languages)}" if languages else ""
        counts = ", ".join(f"{count} {lang}" for lang, count in project.languages[:5])
        found.add(Finding(
            content=f"Has a project named {project.name} in {where}{written}",
            category="fact", entity=f"project:{project.name}",
            why=f"folder {where} ({', '.join(project.markers)}"
                f"{'; source files: ' + counts if counts else ''})",
            key=f"files:project:{where}"))
        for language in languages:
            by_language.setdefault(language, []).append(project.name)
    for language, names in sorted(by_language.items(), key=lambda p: (-len(p[1]), p[0])):
        shown = ", ".join(sorted(names)[:5]) + (", …" if len(names) > 5 else "")
        plural = "project" if len(names) == 1 else "projects"
        found.add(Finding(
            content=f"Writes code in {language} ({len(names)} {plural}: {shown})",
            category="skill", entity=f"language:{language}",
            why=f"the extensions of file names in {len(names)} {plural}",
            key=f"files:language:{language.lower()}"))
    return found
