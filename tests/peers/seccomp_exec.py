"""Run a command under a seccomp filter that refuses chosen system calls with EPERM, as a
systemd unit's `SystemCallFilter=~...` with `SystemCallErrorNumber=EPERM` does.

    /usr/bin/python3 tests/peers/seccomp_exec.py --deny sched_setaffinity --deny fcntl:1=6 -- CMD...

`NAME:I=V` refuses NAME only when its argument I equals V (fcntl's command, prctl's option).
Debian's python3-seccomp binds libseccomp for Debian's python3 only, hence this launcher:
it loads the filter, then execs CMD (the test venv's python), and every process CMD starts
inherits the filter. Standard library and seccomp only.
"""

import errno
import os
import sys

import seccomp


def main(argv: list) -> int:
    split = argv.index("--")
    rules, command = argv[:split], argv[split + 1:]
    refuse = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for flag, rule in zip(rules[::2], rules[1::2]):
        assert flag == "--deny", flag
        name, _, condition = rule.partition(":")
        if condition:
            index, value = condition.split("=")
            refuse.add_rule(seccomp.ERRNO(errno.EPERM), name, seccomp.Arg(int(index), seccomp.EQ, int(value)))
        else:
            refuse.add_rule(seccomp.ERRNO(errno.EPERM), name)
    refuse.load()
    os.execv(command[0], command)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
