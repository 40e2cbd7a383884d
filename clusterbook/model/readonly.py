"""Which commands only look: a troubleshooting command is shown as a read-only diagnosis when every program in
it, with every option and subcommand it is given, is on this list; anything else is an Act step (act: true)."""

from __future__ import annotations

import re
import shlex

# Programs that only read, whatever their options (they have none that write or act).
ANY_ARGS = frozenset({
    "squeue", "sacct", "sinfo", "sprio", "sshare", "sdiag", "ss", "cat", "head", "tail", "ls", "grep", "egrep",
    "jq", "wc", "cut", "tr", "column", "uptime", "free", "df", "du", "lsblk", "lscpu", "lspci", "nproc",
    "numastat", "ibstat", "ibstatus", "ibv_devinfo", "iblinkinfo", "id", "whoami", "getent", "stat", "readlink",
    "realpath", "basename", "dirname", "echo", "printf", "true", "false", "test", "[", "sleep", "ps", "pgrep",
    "lsof", "sha256sum", "md5sum", "file", "which", "uname", "nl", "zcat", "zgrep", "diff", "cmp", "host", "dig",
    "getenforce",
})
# Programs that read in most uses but act in some: what they may be given here (date -s and hostname NAME set the
# clock and the name, sort -o and uniq's second file write).
ARGS_READ = {
    "date": lambda args: all(a.startswith("+") or a in ("-u", "--utc", "-R", "-I") or a.startswith(("-I", "--iso-8601",
                                                                                                 "--rfc-"))
                             for a in args),
    "hostname": lambda args: all(a in ("-f", "-s", "-i", "-I", "-d", "-A", "--fqdn", "--short") for a in args),
    "sort": lambda args: not any(a.startswith("--output") or (a.startswith("-") and not a.startswith("--")
                                                               and "o" in a) for a in args),
    "uniq": lambda args: sum(not a.startswith("-") for a in args) <= 1,
    "nginx": lambda args: bool(args) and all(a in ("-t", "-T", "-q", "-v", "-V") for a in args),  # test, show
    "tailscale": lambda args: [a for a in args if a != "--json"] in (["status"], ["serve", "status"]),
}
# Shell words that start or end a construct: the command after them is checked.
KEYWORDS = frozenset({"while", "until", "if", "then", "do", "else", "elif", "!", "{", "}", "done", "fi", "time"})
# Programs with a subcommand: the first word that is not an option must be one of these (ip's object then takes
# only a verb that shows; invoke also any task with --dry).
SUBCOMMANDS = {
    "systemctl": {"status", "is-active", "is-enabled", "is-failed", "show", "cat", "list-units", "list-timers",
                  "list-unit-files", "list-dependencies", "list-sockets"},
    "scontrol": {"show", "ping", "version"},
    "docker": {"inspect", "ps", "logs", "images", "version", "info", "top", "port"},
    "nft": {"list"},
    "ip": {"route", "addr", "address", "link", "neigh", "rule"},
    "invoke": {"status", "logs", "check", "plan"},
    "clusterbook-jobs": {"squeue", "others", "waiting"},  # a tier's own jobs (node/slurm_jobs.py); submit, cancel act
}
IP_VERBS = {"show", "list", "ls", "get"}
# Programs whose options all read when each is on the list: (short option letters, long options; a long option
# ending in - is a family, --list-…). Words that are not options are their values, paths or URLs.
OPTIONS = {
    "curl": ("sSfiIvkLgmwHo", {"--max-time", "--connect-timeout", "--write-out", "--header", "--include", "--head",
                               "--fail", "--silent", "--show-error", "--output", "--location", "--insecure"}),
    "journalctl": ("utnbpkoqxegrSUf", {"--follow", "--unit", "--identifier", "--lines", "--no-pager", "--boot",
                                       "--since", "--until", "--priority", "--dmesg", "--output", "--quiet", "--grep",
                                      "--reverse", "--no-hostname", "--catalog", "--pager-end", "--utc"}),
    "dmesg": ("TlkxtHLfP", {"--ctime", "--level", "--kernel", "--decode", "--notime", "--human", "--color",
                            "--facility", "--nopager"}),
    "firewall-cmd": ("", {"--list-", "--get-", "--query-", "--info-", "--zone", "--state", "--permanent"}),
    "nvidia-smi": ("qLidxcml", {"--loop", "--loop-ms", "--query-gpu", "--query-compute-apps", "--format", "--id",
                                "--display", "--list-gpus", "--query"}),
    "numactl": ("Hs", {"--hardware", "--show"}),
}
FIND_TESTS = {"-name", "-iname", "-path", "-ipath", "-type", "-maxdepth", "-mindepth", "-mmin", "-mtime", "-newer",
              "-size", "-user", "-group", "-perm", "-print", "-print0", "-ls", "-L", "-H", "-xdev", "-empty", "-not",
              "-o", "-a", "-and", "-or", "-readable", "-writable", "-executable"}
WRAPPERS = {"timeout", "xargs", "nice", "stdbuf", "watch", "env"}  # run the next program: that one is checked
WRITE_TARGETS = {"/dev/null", "&1", "&2"}  # where a diagnosis may redirect output
SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "|&", ";;"}


def _words(run: str) -> list[str]:
    """The command's shell words and operators, with Jinja's expressions as plain words (their values are typed by
    the schema) and command substitutions opened as sub-commands."""
    run = re.sub(r"\{%-?\s*(raw|endraw)\s*-?%\}", "", run)
    run = re.sub(r"\{\{\s*jobs\s*\}\}", "clusterbook-jobs", run)  # the one program a variable names (fixsteps.py)
    run = re.sub(r"\{\{.*?\}\}", "X", run, flags=re.S)
    run = re.sub(r"\b([A-Za-z_][A-Za-z0-9_]*)=\([^()]*\)", r"\1=X", run)  # a shell array's assignment
    run = run.replace("$(", " ( ").replace("`", " ; ")
    lexer = shlex.shlex(run, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def _segments(words: list[str]):
    segment: list[str] = []
    for word in words:
        if word in SEPARATORS:
            if segment:
                yield segment
            segment = []
        else:
            segment.append(word)
    if segment:
        yield segment


def _option_problem(program: str, arg: str, previous: str) -> str | None:
    """An option of a program in OPTIONS that is not on its list (curl's output only to /dev/null)."""
    short, long = OPTIONS[program]
    if arg.startswith("--"):
        name = arg.split("=", 1)[0]
        if not any(name == o or (o.endswith("-") and name.startswith(o)) for o in long):
            return arg
        if name == "--output" and arg.split("=", 1)[-1] not in ("--output", "/dev/null"):
            return arg
    elif arg.startswith("-") and len(arg) > 1 and not arg[1:].isdigit():
        if any(letter not in short for letter in arg[1:]):
            return arg
    elif program == "curl" and previous in ("-o", "--output") and arg != "/dev/null":
        return f"-o {arg}"
    return None


def _program_problem(program: str, args: list[str]) -> str | None:
    """Why a program with these arguments may act ("program option"), or None when it only reads."""
    if program in ANY_ARGS:
        return None
    if program in ARGS_READ:
        return None if ARGS_READ[program](args) else f"{program} {' '.join(args)}"[:80]
    if program == "find":
        valued = FIND_TESTS - {"-print", "-print0", "-ls", "-L", "-H", "-xdev", "-empty", "-not", "-o", "-a",
                               "-and", "-or", "-readable", "-writable", "-executable"}
        for i, arg in enumerate(args):
            if arg.startswith("-") and arg not in FIND_TESTS and not (i and args[i - 1] in valued):
                return f"find {arg}"
        return None
    if program in OPTIONS:
        for i, arg in enumerate(args):
            if problem := _option_problem(program, arg, args[i - 1] if i else ""):
                return f"{program} {problem}"
        return None
    if program in SUBCOMMANDS:
        if program == "invoke" and "--dry" in args:
            return None
        words = [a for a in args if not a.startswith("-")]
        if not words or words[0] not in SUBCOMMANDS[program]:
            return f"{program} {words[0] if words else ''}".strip()
        if program == "ip" and len(words) > 1 and words[1] not in IP_VERBS:
            return f"ip {words[0]} {words[1]}"
        return None
    return program


def not_read_only(run: str) -> str | None:
    """The first part of a command that is not known to only read (a program, a program with an option or
    subcommand, a redirection into a file), or None when every part is."""
    try:
        words = _words(run)
    except ValueError:
        return "the command's quoting"
    for segment in _segments(words):
        i = 0
        while i < len(segment) and (segment[i] in KEYWORDS or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[i])):
            i += 1
        if i < len(segment) and segment[i] in ("for", "case"):
            continue  # its list of words; the body is its own segment
        while i < len(segment) and segment[i] in WRAPPERS:
            i += 1
            while i < len(segment) and (segment[i].startswith("-") or re.fullmatch(r"[0-9.]+[smhd]?", segment[i])):
                i += 1
        if i >= len(segment):
            continue
        program, args = segment[i].rsplit("/", 1)[-1], []
        j = i + 1
        while j < len(segment):
            word = segment[j]
            if word in (">", ">>", ">|", "&>", ">&"):
                target = segment[j + 1] if j + 1 < len(segment) else ""
                if word == ">&" or target in WRITE_TARGETS or target.startswith("&"):
                    if args and args[-1].isdigit():
                        args.pop()  # 2>/dev/null: the 2 is the redirection's
                    j += 2
                    continue
                return f"{word} {target}"
            if word == "<":
                j += 2
                continue
            args.append(word)
            j += 1
        if problem := _program_problem(program, args):
            return problem
    return None
