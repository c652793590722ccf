"""The text of the bash, zsh and fish completions, from ``completion._spec()`` (each
command's options, the values of each option and of its positional). A value that
lives in the state directory is asked of ``qex __complete KIND`` (``completion.values``)."""

from __future__ import annotations

HEAD = "# {shell} completion for qex (generated from its parser: qex completions {shell})\n"


def _words(values: tuple | None) -> str | None:
    return " ".join(values[1]) if values and values[0] == "words" else None


def _bash_offer(values: tuple | None) -> str:
    if values is None or values[0] == "files":
        return "return;;"  # (complete -o default: the shell's files)
    if values[0] == "ask":
        return f'_qex_ask {values[1]} "$cur"; return;;'
    return f'COMPREPLY=($(compgen -W "{_words(values)}" -- "$cur")); return;;'


def bash(spec: list) -> str:
    names = " ".join(n for n, *_ in spec)
    out = [
        HEAD.format(shell="bash"),
        "_qex_ask() {  # values from the state directory (qex filters by the prefix): no lock, no error\n"
        "  # one word a line, never globbed; $(...) reads the pipe in blocks, where mapfile reads it a\n"
        "  # byte at a time (20,000 words: ~60 ms against ~185 ms)\n"
        "  local IFS=$'\\n' -; set -f\n"
        '  COMPREPLY=($(command qex __complete "$1" "$2" 2>/dev/null))\n}\n',
        "_qex() {\n"
        "  local cur=${COMP_WORDS[COMP_CWORD]} prev= cmd=${COMP_WORDS[1]}\n"
        '  [ "$COMP_CWORD" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD-1]}\n'
        "  COMPREPLY=()\n"
        f'  if [ "$COMP_CWORD" -eq 1 ]; then COMPREPLY=($(compgen -W "{names}" -- "$cur")); return; fi\n'
        '  case "$cmd" in\n',
    ]
    for name, opts, per_option, positional, shorts in spec:
        out.append(f"    {name})\n")
        takes = list(per_option)
        if takes:
            out.append('      case "$prev" in\n')
            for option in takes:
                out.append(f"        {option}) {_bash_offer(per_option[option])}\n")
            out.append("      esac\n")
        out.append(
            f'      if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "{" ".join(opts)}" -- "$cur")); return; fi\n'
        )
        if positional is not None and positional[0] != "files":
            out.append(f"      {_bash_offer(positional)}\n")
        else:
            out.append("      ;;\n")
    out.append("  esac\n}\ncomplete -o default -o nosort -F _qex qex 2>/dev/null || complete -o default -F _qex qex\n")
    return "".join(out)


def _zsh_offer(values: tuple | None) -> str:
    if values is None:
        return "return;;"
    if values[0] == "files":
        return "_files; return;;"
    if values[0] == "ask":
        return f'compadd -V qex -- ${{(f)"$(command qex __complete {values[1]} 2>/dev/null)"}}; return;;'
    return f"compadd -- {_words(values)}; return;;"


def zsh(spec: list) -> str:
    names = " ".join(n for n, *_ in spec)
    out = [
        "#compdef qex\n",
        HEAD.format(shell="zsh"),
        "_qex() {\n  local cur=${words[CURRENT]} prev=${words[CURRENT-1]} cmd=${words[2]}\n"
        f"  if (( CURRENT == 2 )); then compadd -- {names}; return; fi\n"
        "  case $cmd in\n",
    ]
    for name, opts, per_option, positional, shorts in spec:
        out.append(f"    {name})\n")
        if per_option:
            out.append("      case $prev in\n")
            for option, values in per_option.items():
                out.append(f"        {option}) {_zsh_offer(values)}\n")
            out.append("      esac\n")
        out.append(f"      if [[ $cur == -* ]]; then compadd -- {' '.join(opts)}; return; fi\n")
        out.append(f"      {_zsh_offer(positional)}\n" if positional is not None else "      _files;;\n")
    out.append("  esac\n}\ncompdef _qex qex\n")
    return "".join(out)


def _fish_values(values: tuple | None) -> str:
    if values is None:
        return " -x"
    if values[0] == "files":
        return " -r -F"
    if values[0] == "ask":
        return f" -x -a '(command qex __complete {values[1]} 2>/dev/null)'"
    return f" -x -a '{_words(values)}'"


def fish(spec: list) -> str:
    out = [HEAD.format(shell="fish"), "complete -c qex -f\n"]
    for name, opts, per_option, positional, shorts in spec:
        out.append(f"complete -c qex -n __fish_use_subcommand -a {name}\n")
        when = f"-n '__fish_seen_subcommand_from {name}'"
        for option in opts:
            if not option.startswith("--"):
                continue
            flag = f" -s {shorts[option][1:]}" if option in shorts else ""
            takes = option in per_option
            out.append(
                f"complete -c qex {when} -l {option[2:]}{flag}{_fish_values(per_option[option]) if takes else ''}\n"
            )
        if positional is not None:
            out.append(f"complete -c qex {when}{_fish_values(positional)}\n")
    return "".join(out)
