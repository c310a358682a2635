#!/usr/bin/env python3
"""Every subcommand, flag and positional argument of the pipeplan binary is in the reference.

Usage: cli_reference_test.py PIPEPLAN_BINARY PROJECT_SOURCE_DIR

Runs `pipeplan --help` and `pipeplan SUB --help` for every subcommand the help lists (and
their own subcommands, if any), takes each long flag (`--name`; a short flag where an option has
no long one) and each positional argument, and compares them with docs/reference/cli.md:

- one section per command, headed `## pipeplan` (the global options) or `## pipeplan SUB`;
- in a section, a table row documents what its first cell names in backticks: `--flag`
  (optionally followed by its value, `--steps N`), `-o` for a short flag, `<name>` for a
  positional argument.

It fails naming each command without a section, each flag or positional missing from its
command's section, each one documented that the binary no longer has, and each section for a
command that does not exist. It also checks that a default the reference's three-column rows
state as a number or list is the one --help states, that the --schedule row lists every family
`plan --help` does, and that README.md has at most 250 lines; where the defaults, the families or
the --schedule row are not found at all, that is a problem too, not a check skipped.
"""

import re
import subprocess
import sys
from pathlib import Path

README_MAX_LINES = 250
HELP_FLAGS = {"--help", "-h"}


def help_text(binary, words):
    result = subprocess.run([binary, *words, "--help"], capture_output=True, text=True,
                            timeout=60)
    if result.returncode != 0:
        raise SystemExit(f"`{' '.join(['pipeplan', *words, '--help'])}` exited "
                         f"{result.returncode}: {result.stderr.strip()}")
    return result.stdout


def parse_help(text):
    """(flags, aliases, positionals, subcommands) named in one CLI11 help text: `flags` must be
    documented (long names; a short one where an option has no long name), `aliases` may be
    (the short names of options that have a long one)."""
    flags, aliases, positionals, subcommands = set(), set(), set(), []
    section = None
    for line in text.splitlines():
        header = re.match(r"^([A-Za-z][^:]*):\s*$", line)
        if header:
            section = header.group(1).strip().lower()
            continue
        # An entry starts two spaces in; descriptions that wrap are indented further.
        entry = re.match(r"^  (\S.*)$", line)
        if not entry or section is None:
            continue
        name_part = re.split(r"\s{2,}", entry.group(1).strip(), maxsplit=1)[0]
        first = name_part.split()[0]
        if section == "subcommands":
            subcommands.append(first)
        elif section == "positionals":
            positionals.add(first)
        elif first.startswith("-"):
            names = [n for n in first.split(",") if n.startswith("-")]
            long_names = [n for n in names if n.startswith("--")]
            for name in names:
                name = name.split("=")[0]
                if name in HELP_FLAGS:
                    aliases.add(name)  # every command has them: documenting them is optional
                    continue
                if name in long_names or not long_names:
                    flags.add(name)
                else:
                    aliases.add(name)
    return flags, aliases, positionals, subcommands


def walk_commands(binary, words=()):
    """{command words: (flags, aliases, positionals)} for the binary and every subcommand below."""
    flags, aliases, positionals, subcommands = parse_help(help_text(binary, list(words)))
    commands = {tuple(words): (flags, aliases, positionals)}
    for sub in subcommands:
        commands.update(walk_commands(binary, (*words, sub)))
    return commands


def parse_reference(path):
    """{command words: (flags, positionals)} documented in docs/reference/cli.md."""
    sections = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## pipeplan\b(.*)$", line)
        if heading:
            current = tuple(heading.group(1).split())
            sections.setdefault(current, (set(), set()))
            continue
        if line.startswith("## "):
            current = None
            continue
        if current is None or not line.lstrip().startswith("|"):
            continue
        # Cells split on unescaped pipes (`--model NAME\\|FILE` is one cell).
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        if not cells:
            continue
        for span in re.findall(r"`([^`]+)`", cells[0]):
            word = span.split()[0].split("=")[0]
            if re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9_-]*", word):
                sections[current][0].add(word)
            elif re.fullmatch(r"<[A-Za-z0-9_-]+>", word):
                sections[current][1].add(word[1:-1])
    return sections


def help_defaults(text):
    """{flag: default} that one help text states: CLI11's `--flag TYPE=VALUE`, or `(default
    VALUE)` in the description, for numbers and comma-separated lists of them."""
    defaults = {}
    flag = None
    for line in text.splitlines():
        entry = re.match(r"^  (-\S*)(.*)$", line)
        if entry:
            names = [n.split("=")[0] for n in entry.group(1).split(",") if n.startswith("--")]
            flag = names[0] if names else None
            typed = re.match(r"^\s+[A-Z]+(?: \.\.\.)?=([0-9.,]+)\s", entry.group(2) + " ")
            if flag and typed:
                defaults[flag] = typed.group(1)
        elif not re.match(r"^\s{3,}\S", line):
            flag = None
        stated = re.search(r"\(default:? ([0-9][0-9.,]*)\)", line)
        if flag and stated:
            defaults[flag] = stated.group(1)
    return defaults


def reference_defaults(path):
    """{(command words, flag): default} from the reference's three-column rows (option, default,
    meaning) whose default cell is one number or list in backticks."""
    defaults = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## pipeplan\b(.*)$", line)
        if heading:
            current = tuple(heading.group(1).split())
            continue
        if line.startswith("## "):  # the options shared by plan, compare and import: plan's
            current = ("plan",) if line.startswith("## Options shared") else None
            continue
        if current is None or not line.lstrip().startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) != 3:
            continue
        flag = re.match(r"^`(--[A-Za-z0-9-]+)", cells[0])
        value = re.fullmatch(r"`?([0-9][0-9.,]*)`?", cells[1])
        if flag and value:
            defaults[(current, flag.group(1))] = value.group(1)
    return defaults


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    binary, source = sys.argv[1], Path(sys.argv[2])
    problems = []

    readme_lines = len((source / "README.md").read_text(encoding="utf-8").splitlines())
    if readme_lines > README_MAX_LINES:
        problems.append(f"README.md: {readme_lines} lines, at most {README_MAX_LINES}")

    reference_path = source / "docs" / "reference" / "cli.md"
    actual = walk_commands(binary)
    documented = parse_reference(reference_path)

    for words, (flags, aliases, positionals) in sorted(actual.items()):
        title = " ".join(("pipeplan", *words))
        if words not in documented:
            problems.append(f"{reference_path}: no section '## {title}'")
            continue
        doc_flags, doc_positionals = documented[words]
        for flag in sorted(flags - doc_flags):
            problems.append(f"{title}: {flag} is not documented in its section")
        for name in sorted(positionals - doc_positionals):
            problems.append(f"{title}: positional <{name}> is not documented in its section")
        for flag in sorted(doc_flags - flags - aliases):
            problems.append(f"{title}: {flag} is documented but the binary has no such flag")
        for name in sorted(doc_positionals - positionals):
            problems.append(f"{title}: positional <{name}> is documented but the binary has none")
    for words in sorted(set(documented) - set(actual)):
        problems.append(f"{reference_path}: section '## {' '.join(('pipeplan', *words))}' "
                        "names a command the binary does not have")

    # A default the reference states as a number or list is the one the binary's help states.
    documented_defaults = reference_defaults(reference_path)
    if not documented_defaults:
        problems.append(f"{reference_path}: no option row states a numeric default (the "
                        "three-column rows' format changed?)")
    for (words, flag), value in sorted(documented_defaults.items()):
        stated = help_defaults(help_text(binary, list(words))).get(flag)
        title = " ".join(("pipeplan", *words))
        if stated is None:
            problems.append(f"{title}: {flag} defaults to {value} in {reference_path}, and "
                            "--help states no default for it")
        elif stated != value:
            problems.append(f"{title}: {flag} defaults to {stated} in --help, {value} in "
                            f"{reference_path}")

    # Every schedule family `plan --help` lists is in the reference's --schedule row.
    families = re.search(r"schedule family: ((?:[a-z0-9-]+, )*[a-z0-9-]+)",
                         " ".join(help_text(binary, ["plan"]).split()))
    row = next((line for line in reference_path.read_text(encoding="utf-8").splitlines()
                if line.startswith("| `--schedule NAME`")), "")
    if not families:
        problems.append("pipeplan plan --help: no 'schedule family: A, B, ...' in --schedule's "
                        "description")
    if not row:
        problems.append(f"{reference_path}: no row starting '| `--schedule NAME`'")
    for family in families.group(1).split(", ") if families else []:
        if f"`{family.strip()}`" not in row:
            problems.append(f"{reference_path}: --schedule does not list the family {family}")

    if problems:
        print("\n".join(problems))
        print(f"cli reference: {len(problems)} problem(s)")
        return 1
    count = sum(len(f) + len(p) for f, _, p in actual.values())
    print(f"cli reference: {len(actual)} commands, {count} flags and positionals, all documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
