"""A systemd unit file's commands as systemd runs them (the package's test and the unit's
mount test run its Exec* lines themselves, without systemd)."""
import shlex


def unit_commands(path, uenv, subst=None):
    """({key: [argv, ...]}, {key: value}): the Exec* lines of the unit file at path, each as
    the argv systemd makes of it ($VAR splits into words, ${VAR} is one word; both from
    uenv), in file order, and its other settings. subst ({text: replacement}) is applied to
    each Exec* line first (a unit template's @BINDIR@). Empty lines, comments and section
    headers are skipped."""
    execs, settings = {}, {}
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if not ln or ln.startswith(('#', ';')) or '=' not in ln:
                continue
            k, _, v = ln.partition('=')
            if not k.startswith('Exec'):
                settings[k] = v
                continue
            for a, b in (subst or {}).items():
                v = v.replace(a, b)
            words = []
            for w in shlex.split(v):
                if w.startswith('${'):
                    words.append(uenv[w[2:-1]])
                elif w.startswith('$'):
                    words += uenv[w[1:]].split()
                else:
                    words.append(w)
            execs.setdefault(k, []).append(words)
    return execs, settings
