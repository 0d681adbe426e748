"""``speedbench run``'s argv: speedbench's own options taken out, Hydra's options put in front."""
from __future__ import annotations

from dataclasses import dataclass

from ..console import UsageError

# Hydra's own options that take a value (``-cd DIR``); everything else starting with ``-`` is a flag.
_HYDRA_VALUE_OPTIONS = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-c", "--cfg",
                        "-p", "--package", "--experimental-rerun"}
_INFO_CHOICES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


@dataclass(frozen=True)
class OwnOptions:
    """speedbench's own ``run`` options: ``--json FILE`` (``-`` = stdout); ``--check`` (validate, load and run nothing);
    ``--wide`` (the end-of-run table with every column, not fitted to 120)."""

    json: str | None = None
    check: bool = False
    wide: bool = False


def split_run_argv(argv: list[str]) -> tuple[list[str], OwnOptions]:
    """Speedbench's own ``run`` options out of argv, Hydra's options in front of the overrides.

    Hydra's parser takes its flags only before the overrides; speedbench builds Hydra's argv
    itself, so ``-m``, ``--config-dir DIR`` etc. may stand anywhere on the line.
    """
    options: list[str] = []
    overrides: list[str] = []
    json_path, check, wide = None, False, False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--check":
            check, i = True, i + 1
            continue
        if arg == "--wide":
            wide, i = True, i + 1
            continue
        if arg == "--json" or arg.startswith("--json="):
            if arg == "--json":
                if i + 1 >= len(argv):
                    raise UsageError("--json needs a file name (or - for stdout)")
                json_path, i = argv[i + 1], i + 2
            else:
                json_path, i = arg.split("=", 1)[1], i + 1
            continue
        if arg == "--":
            overrides.extend(argv[i + 1:])
            break
        if arg.startswith("-") and len(arg) > 1:
            options.append(arg)
            takes = arg in _HYDRA_VALUE_OPTIONS or (arg in {"-i", "--info"} and i + 1 < len(argv) and argv[i + 1] in _INFO_CHOICES)
            if takes and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
        else:
            overrides.append(arg)
        i += 1
    return options + overrides, OwnOptions(json_path, check, wide)


def is_multirun(argv: list[str]) -> bool:
    return "-m" in argv or "--multirun" in argv


def hydra_error_line(text: str) -> str:
    """One line from a Hydra/argparse error report."""
    lines = [ln.strip() for ln in text.splitlines()]
    for ln in lines:
        if " error: " in ln or ln.startswith("error:"):
            return ln.split("error:", 1)[1].strip()
    kept = []
    for ln in lines:
        if not ln or ln.startswith(("full_key", "object_type", "Set the environment variable HYDRA_FULL_ERROR")):
            if kept:
                break
            continue
        kept.append(ln)
    return " ".join(kept) or "invalid arguments (see speedbench run --help)"
