"""Run one command under a lease that jobctl keeps alive.

A :class:`Run` takes a record its caller has just claimed and a
:class:`Command`, and runs the command as a :class:`ChildWork` under a
:class:`jobctl.keeper.Keeper`: the keeper keeps the lease (renewal every
third of the TTL, the intent and recall checks, fencing, the final write) and
asks the child to stop when the record says so; this module starts the child
and supervises it from the keeper's thread, without blocking on it: the
keeper's ``poll`` loop waits on the child's exit (a pidfd on Linux), on its
output and on the next deadline. What the keeper does at each deadline is
told in :mod:`jobctl.keeper`; for a child it means:

* ``cancel``, ``pause``, a recall, :meth:`Run.stop` -> SIGTERM to the child's
  process group, SIGKILL after the grace (a recall: before ``until``);
* the lease lost (``stale_epoch``, ``lease_expired``, or a read showing that
  somebody else claimed) -> SIGKILL at once, and nothing more is written
  [JOB-L5]; the same just before the lease runs out when renewals keep
  failing for another reason, so an adopter never starts while this child
  still runs.

The child is started by a :class:`Guardian`, a small process of the
supervisor's that is the child's parent: it spawns the command in its own
process group, registered with its deadline (a little before its lease can
run out) before it runs any code of the job, and the supervisor moves that
deadline at every renewal. Every signal for the group goes through it, the
one process that reaps the child: it SIGKILLs the group when the supervisor
is stopped (SIGSTOP, Ctrl-Z) and its deadline comes, and every group when the
supervisor dies. It also reads the lease itself where the store says how
(:meth:`~jobctl.store.base.Store.lease_source`: the record file, or the
PostgreSQL row), so a recall or a claim made while the supervisor is stopped
is honoured too. ``jobctl run`` and the worker use it alike. A run that finds
its child's exit only after its own lease deadline (it was stopped) writes
nothing more. A process that escapes anyway (one that started its own
session) has every write refused by the epoch fencing once the job is
adopted. When the child exits, whatever is left in its process group is
killed: a job's processes do not outlive it.

On exit status 0 the record becomes ``complete``; otherwise the failure is
counted under the job's retry policy (:func:`jobctl.schedule.record_failure`)
and the record either goes back to ``pending`` with its next not-before time
or ends ``failed``. The state, the error and the retry bookkeeping travel in
one update, and the update re-reads the record under the lock, so the
checkpoint and ``done`` a child wrote itself (``jobctl checkpoint`` with the
same epoch) are what the final write carries [JOB-T4].

Output: each attempt's stdout and stderr go to
``<root>/work/.jobctl/logs/<id>.attempt-<N>.log`` (see :func:`logs_dir` for why
not inside ``work/<id>``, and why not a directory a job).

The package, one idea a module: :mod:`~jobctl.runner.command` (what to run
and the environment it starts with), :mod:`~jobctl.runner.logs` (the attempt
logs and the result file), :mod:`~jobctl.runner.start` (the executable's lookup, the margins), and
:mod:`~jobctl.runner.child` (the child's work and :class:`Run`). The guardian
is :mod:`jobctl.guardian`. Everything a caller uses is named here.
"""

from ..guardian import Guardian, LeaseRecord
from ..keeper import Outcome
from .child import ChildWork, ClaimStore, Run, claim_next
from .command import SHELL, Command, Processor, RunStore, child_env, handler_command, processors, shell_command
from .logs import LogNames, LogRoot, log_dir, log_files, log_open, log_path, log_read, log_size, logs_dir, result_path

__all__ = [
    "Command",
    "Outcome",
    "Processor",
    "Run",
    "ChildWork",
    "RunStore",
    "shell_command",
    "handler_command",
    "processors",
    "log_dir",
    "LogRoot",
    "LogNames",
    "logs_dir",
    "log_path",
    "log_files",
    "log_open",
    "log_read",
    "log_size",
    "result_path",
    "child_env",
    "SHELL",
    "ClaimStore",
    "claim_next",
    "Guardian",
    "LeaseRecord",
]
