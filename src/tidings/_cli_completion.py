"""``tidings completion bash|zsh``: a completion script made from the command's own
parser, so it never falls behind it. ``source <(tidings completion bash)`` in
``~/.bashrc`` (``zsh`` likewise in ``~/.zshrc``: it loads bash's completion there)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

__all__ = ["add_completion_parser", "run_completion", "script"]


def add_completion_parser(sub: Any) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh)")
    p.add_argument("shell", choices=["bash", "zsh"])


def _walk(parser: argparse.ArgumentParser, path: str, out: dict[str, list[str]]) -> None:
    words: list[str] = []
    for action in parser._actions:  # argparse has no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                words.append(name)
                _walk(child, f"{path} {name}".strip(), out)
        elif action.option_strings:
            words += [o for o in action.option_strings if o.startswith("--")]
        elif action.choices:
            words += [str(c) for c in action.choices]
    out[path] = words


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    table: dict[str, list[str]] = {}
    _walk(parser, "", table)
    cases = "\n".join(f"    {shlex.quote(path) if path else chr(34) * 2}) echo {shlex.quote(' '.join(words))} ;;"
                      for path, words in sorted(table.items()))
    body = f"""_tidings_words() {{
  case "$1" in
{cases}
    *) return 1 ;;
  esac
}}

_tidings() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="" next w i
  if [[ "$prev" == "--profile" ]]; then
    COMPREPLY=( $(compgen -W "$(tidings profile ls 2>/dev/null | cut -c3- | cut -d' ' -f1)" -- "$cur") )
    return
  fi
  for ((i=1; i<COMP_CWORD; i++)); do
    w="${{COMP_WORDS[i]}}"
    [[ "$w" == -* ]] && continue
    next="${{path:+$path }}$w"
    if _tidings_words "$next" >/dev/null; then path="$next"; fi
  done
  COMPREPLY=( $(compgen -W "$(_tidings_words "$path")" -- "$cur") )
}}

complete -o default -F _tidings tidings
"""
    if shell == "zsh":
        return "#compdef tidings\nautoload -U +X bashcompinit && bashcompinit\n" + body
    return body


def run_completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    print(script(parser, args.shell), end="")
    return 0
