"""Piped output: upstream's plain lines (DIGEST §8.1), byte for byte, for every command."""

from __future__ import annotations

import json
import re

from clitools import ID_LINE, Clock, Jobctl

import jobctl as jobctl_package
from jobctl.record import AFTER, MODELS, PIPELINE, RETRY

AWKWARD_SPEC = (
    '{"zebra": 1.50, "apple": "a\\/b", "url": "https://x.example/?a=1&b=<2>", "e": "\\u00e9", '
    '"n": 12345678901234567890, "z": -0.0, "x": 1e2}'
)


def test_submit_prints_the_id_and_keeps_the_spec_token_for_token(jobctl: Jobctl) -> None:
    ran = jobctl("submit", "--kind", "download", "--spec", AWKWARD_SPEC, "--total", "100")
    assert ran.code == 0 and ran.err == ""
    assert ID_LINE.match(ran.out)
    record = jobctl.record(ran.text.strip()).decode()
    assert (
        '  "spec": {\n    "zebra": 1.50,\n    "apple": "a\\/b",\n    "url": "https://x.example/?a=1&b=<2>",\n'
        '    "e": "\\u00e9",\n    "n": 12345678901234567890,\n    "z": -0.0,\n    "x": 1e2\n  },\n'
    ) in record
    assert '"total": 100' in record


def test_submit_reads_the_spec_from_a_file_or_stdin(jobctl: Jobctl, tmp_path: object) -> None:
    spec_file = jobctl.home / "spec.json"
    spec_file.write_text('{"from": "file", "n": 1.0}')
    from_file = jobctl.submit("--spec", f"@{spec_file}")
    from_stdin = jobctl("submit", "--kind", "test", "--spec", "-", input='{"from": "stdin", "n": 2.0}\n')
    assert from_stdin.code == 0
    assert b'"from": "file",\n    "n": 1.0' in jobctl.record(from_file)
    assert b'"from": "stdin",\n    "n": 2.0' in jobctl.record(from_stdin.text.strip())


def test_submit_defaults_the_spec_to_an_empty_object_and_splits_requires(jobctl: Jobctl) -> None:
    job = jobctl.submit("--requires", "gpu,disk")
    record = jobctl.record(job).decode()
    assert '"spec": {},' in record
    assert '"requires": [\n    "gpu",\n    "disk"\n  ],' in record


def test_submit_with_a_chosen_id(jobctl: Jobctl) -> None:
    ran = jobctl("submit", "--kind", "test", "--id", "nightly-2030-01-02")
    assert ran.out == b"nightly-2030-01-02\n"


def test_claim_prints_epoch_state_and_the_checkpoint_left_behind(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    assert jobctl("claim", job, "--owner", "a").out == b"epoch=1 state=running checkpoint=none\n"
    assert jobctl("progress", job, "--epoch", "1", "--done", "7", "--checkpoint", '{ "off" : 1.50 }').out == (
        b'done=7 checkpoint={"off":1.50}\n'
    )
    assert jobctl("release", job, "--epoch", "1").out == b"state=pending\n"
    assert jobctl("claim", job, "--owner", "b").out == b'epoch=2 state=running checkpoint={"off":1.50}\n'


def test_progress_without_done_writes_zero_as_upstream(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a")
    jobctl("progress", job, "--epoch", "1", "--done", "9")
    assert jobctl("progress", job, "--epoch", "1").out == b"done=0 checkpoint=none\n"


def test_checkpoint_replaces_the_checkpoint_and_keeps_done(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a")
    jobctl("progress", job, "--epoch", "1", "--done", "9")
    ran = jobctl("checkpoint", job, '{"offset": 4096, "etag": "\\u00e9"}', "--epoch", "1")
    assert ran.out == b'done=9 checkpoint={"offset":4096,"etag":"\\u00e9"}\n'
    assert jobctl("checkpoint", job, "[1,2]", "--epoch", "1", "--done", "12").out == b"done=12 checkpoint=[1,2]\n"


def test_renew_prints_the_new_expiry(jobctl: Jobctl, fixed_clock: Clock) -> None:
    store = jobctl.store(fixed_clock)
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a", "--ttl", "10", store=store)
    fixed_clock.advance(5)
    ran = jobctl("renew", job, "--epoch", "1", "--ttl", "60", store=store)
    assert ran.out == b"epoch=1 expires_at=2030-01-02T03:05:10.987654Z\n"


def test_finish_carries_error_checkpoint_and_done_in_the_final_write(jobctl: Jobctl) -> None:
    job = jobctl.submit("--total", "10")
    jobctl("claim", job, "--owner", "a")
    ran = jobctl(
        "finish",
        job,
        "--epoch",
        "1",
        "--state",
        "failed",
        "--error",
        "disk full",
        "--checkpoint",
        '{"at":3}',
        "--done",
        "3",
    )
    assert ran.out == b"state=failed\n"
    record = json.loads(jobctl.record(job))
    assert (record["state"], record["error"], record["checkpoint"], record["progress"]["done"]) == (
        "failed",
        "disk full",
        {"at": 3},
        3,
    )


def test_finish_needs_a_state_unlike_upstream(jobctl: Jobctl) -> None:
    # Upstream's jobctl defaults to transferred: a job then neither runnable nor
    # finished. jobctl has no default; the usage error names the choices.
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a")
    before = jobctl.record(job)
    ran = jobctl("finish", job, "--epoch", "1")
    assert ran.code == 2 and ran.out == b""
    assert ran.err.splitlines()[-1] == (
        "Error: finish needs --state: one of pending, running, transferred, complete, failed or cancelled"
    )
    assert jobctl.record(job) == before
    assert jobctl("finish", job, "--epoch", "1", "--state", "transferred").out == b"state=transferred\n"
    assert "upstream" in jobctl("finish", "--help").text


def test_show_prints_the_canonical_record_bytes(jobctl: Jobctl) -> None:
    job = jobctl.submit("--spec", AWKWARD_SPEC)
    jobctl("claim", job, "--owner", "a")
    ran = jobctl("show", job)
    assert ran.out == jobctl.record(job)
    assert ran.out.endswith(b"}\n")


def test_intent_and_approve_print_id_and_want(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    assert jobctl("intent", job, "pause", "--by", "ops").out == f"{job} pause\n".encode()
    assert json.loads(jobctl.record(job))["intent"]["by"] == "ops"
    assert jobctl("approve", job).out == f"{job} run\n".encode()
    assert json.loads(jobctl.record(job))["intent"]["by"].startswith("jobctl@")


def test_recall_prints_until_in_whole_seconds(jobctl: Jobctl, fixed_clock: Clock) -> None:
    store = jobctl.store(fixed_clock)
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a", "--ttl", "300", store=store)
    ran = jobctl("recall", job, "--epoch", "1", "--reason", "host going down", store=store)
    assert ran.out == f"{job} recalled until 2030-01-02T03:04:35Z\n".encode()
    ran = jobctl("recall", job, "--reason", "sooner", "--grace", "5.5", store=store)  # epoch: the current one
    assert ran.out == f"{job} recalled until 2030-01-02T03:04:11Z\n".encode()


def test_cancel_prints_the_state(jobctl: Jobctl) -> None:
    idle = jobctl.submit()
    assert jobctl("cancel", idle).out == f"{idle} cancelled\n".encode()
    assert jobctl("cancel", idle).out == f"{idle} cancelled\n".encode()  # a double click is fine
    held = jobctl.submit()
    jobctl("claim", held, "--owner", "worker", "--ttl", "300")
    assert jobctl("cancel", held).out == f"{held} running\n".encode()
    assert json.loads(jobctl.record(held))["intent"]["want"] == "cancel"


def test_list_and_orphans_print_one_line_a_job(jobctl: Jobctl) -> None:
    first = jobctl.submit("--spec", '{"n": 1}')
    second = jobctl.submit()
    jobctl("claim", second, "--owner", "a", "--ttl", "300")
    jobctl("checkpoint", second, '{"k": [1, 2.0]}', "--epoch", "1", "--done", "5")
    assert (
        jobctl("list").out
        == (  # upstream's lines, running jobs first (list --help)
            f'{second} kind=test state=running done=5 checkpoint={{"k":[1,2.0]}}\n'
            f"{first} kind=test state=pending done=0 checkpoint=none\n"
        ).encode()
    )
    assert jobctl("orphans").out == f"{first} kind=test state=pending checkpoint=none\n".encode()


def test_list_filters(jobctl: Jobctl) -> None:
    a = jobctl("submit", "--kind", "fetch").text.strip()
    b = jobctl("submit", "--kind", "build").text.strip()
    jobctl("claim", b, "--owner", "w1", "--ttl", "300")
    assert [line.split()[0] for line in jobctl("list", "--kind", "fetch").lines] == [a]
    assert [line.split()[0] for line in jobctl("list", "--state", "running").lines] == [b]
    assert [line.split()[0] for line in jobctl("list", "--owner", "w1").lines] == [b]
    assert [line.split()[0] for line in jobctl("list", "--orphans").lines] == [a]
    assert jobctl("list", "--kind", "nothing").out == b""


def test_an_empty_store_lists_nothing(jobctl: Jobctl) -> None:
    assert (jobctl("list").code, jobctl("list").out) == (0, b"")
    assert (jobctl("orphans").code, jobctl("orphans").out) == (0, b"")


def test_sweep_removes_stale_temporaries(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    (jobctl.root / "jobs" / f"{job}.json.abc123.tmp").write_text("half a record")
    assert jobctl("sweep").out == b"removed=1\n"
    assert jobctl("sweep", job).out == b"removed=0\n"


def test_paths_names_the_root_the_rung_and_the_checks(jobctl: Jobctl) -> None:
    ran = jobctl("paths")
    assert ran.code == 0
    facts = dict(line.split("=", 1) for line in ran.lines)
    assert facts["root"] == str(jobctl.root)
    assert facts["rung"] == "JOB_STORE"
    assert facts["config"] == str(jobctl.home / ".config" / "abstraction" / "config.json")
    assert facts["config_status"] == "absent"
    assert (facts["check_open"], facts["check_lock"], facts["check_rename"]) == ("ok", "ok", "ok")
    assert jobctl("doctor").out == ran.out
    assert sorted(p.name for p in (jobctl.root / "jobs").iterdir()) == []  # the probes are gone


def test_paths_shows_which_worker_settings_applied(jobctl: Jobctl) -> None:
    plain = dict(line.split("=", 1) for line in jobctl("paths").lines)
    assert plain["worker.concurrency"].endswith("(default)")
    env = {"MAX_CONCURRENT_JOBS": "3"}
    plain = dict(line.split("=", 1) for line in jobctl("paths", env=env).lines)
    assert plain["worker.concurrency"].startswith("3 (") and "MAX_CONCURRENT_JOBS" in plain["worker.concurrency"]
    as_json = json.loads(jobctl("paths", "--json", env=env).lines[0])
    rows = {row["name"]: row for row in as_json["worker"]}
    assert rows["concurrency"]["value"] == "3" and "MAX_CONCURRENT_JOBS" in rows["concurrency"]["source"]


def test_go_flag_spellings_and_positionals_anywhere(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    assert jobctl("claim", "-owner", "me", "-ttl=60", job).out == b"epoch=1 state=running checkpoint=none\n"
    assert jobctl("progress", "--epoch=1", job, "-done", "4").out == b"done=4 checkpoint=none\n"
    assert jobctl("intent", job, "--by", "ui", "pause").out == f"{job} pause\n".encode()
    assert jobctl("--store", str(jobctl.root), "list").lines[0].startswith(job)


def test_watch_prints_the_present_then_exits_when_quiet(jobctl: Jobctl) -> None:
    job = jobctl.submit("--total", "10")
    ran = jobctl("watch", "--quiet-after", "0.2", "--exit-on-quiet")
    assert (ran.code, ran.out) == (0, f"{job} kind=test state=pending done=0 total=10 owner=-\n".encode())
    other = jobctl("submit", "--kind", "other").text.strip()
    assert jobctl("watch", other, "--quiet-after", "0.1", "--exit-on-quiet").lines == [
        f"{other} kind=other state=pending done=0 total=0 owner=-"
    ]
    assert jobctl("watch", "--kind", "test", "--quiet-after", "0.1", "--exit-on-quiet").lines[0].startswith(job)


def test_wait_prints_each_job_as_it_settles(jobctl: Jobctl) -> None:
    job = jobctl.submit()
    jobctl("claim", job, "--owner", "a")
    jobctl("finish", job, "--epoch", "1", "--state", "complete")
    ran = jobctl("wait", job)
    assert (ran.code, ran.out, ran.err) == (0, f"{job} complete\n".encode(), "")


def test_help_goes_to_stdout(jobctl: Jobctl) -> None:
    for args in (("--help",), ("-h",), ("help",), ("help", "claim"), ("claim", "--help")):
        ran = jobctl(*args)
        assert ran.code == 0, args
        assert ran.text.startswith("Usage: jobctl"), args
        assert ran.err == ""
    assert re.search(r"^  claim +Take a job's lease", jobctl("help").text, re.M)


def test_version_names_the_release_and_every_model_it_speaks(jobctl: Jobctl) -> None:
    ran = jobctl("--version")
    assert (ran.code, ran.err) == (0, "")
    lines = ran.text.splitlines()
    assert lines[0] == f"jobctl {jobctl_package.__version__}"  # the one version source
    assert lines[1] == "abstraction-job file binding, models:"
    ext = lines.index("jobctl extensions:")
    assert [line.strip() for line in lines[2:ext]] == sorted(MODELS)  # the whole roster, sorted
    assert "  abstraction.job/terminal@1" in lines[2:ext]
    assert [line.strip() for line in lines[ext + 1 :]] == sorted((AFTER, PIPELINE, RETRY))


def test_a_damaged_record_is_named_with_where_the_json_breaks(jobctl: Jobctl) -> None:
    jobctl.submit()  # opens the store
    (jobctl.root / "jobs" / "1-bad.json").write_text('{"a": [1, }')
    ran = jobctl("show", "1-bad")
    assert ran.code == 9 and ran.out == b""
    assert ran.err.strip() == (
        "jobctl: invalid: 1-bad: expected a JSON value at line 1 column 11; "
        "the record file jobs/1-bad.json is damaged: look at it, restore or remove it"
    )


def test_watch_names_an_unreadable_record_once_and_its_dependent_as_blocked(jobctl: Jobctl) -> None:
    broken = "1787202430967-a752f9a9c2c77b123ffd"
    path = jobctl.root / "jobs" / f"{broken}.json"
    path.write_bytes(b"garbage")
    waiting = jobctl.submit("--after", broken)
    ran = jobctl("watch", "--quiet-after", "0.2", "--exit-on-quiet")
    assert ran.code == 0
    assert ran.err.splitlines() == [
        f"jobctl: unreadable: {broken} {path}: record is not valid JSON at byte 0",
        f"jobctl: blocked: {waiting} waits for {broken}, which cannot be read",
    ]
    assert ran.lines[0].startswith(f"{waiting} kind=test state=pending")


def test_a_record_s_own_text_never_splits_or_colours_a_plain_line(jobctl: Jobctl) -> None:
    """Another writer may put a newline or an escape in kind, owner or error: each line stays one line, escaped."""
    from jobctl import Record, summary
    from jobctl.cli import render

    store = jobctl.store()
    odd = store.submit(Record(kind="a\nb", spec={}))
    done = store.submit(Record(kind="c\x1b[31m", spec={}))
    epoch = store.claim(done, "host\n1", 60).lease.epoch
    store.finish(done, epoch, "failed", error="line one\nline two\u2028")
    listed = jobctl("list")
    assert listed.code == 0
    assert sorted(listed.lines) == sorted(
        [
            f"{odd} kind=a\\nb state=pending done=0 checkpoint=none",
            f"{done} kind=c\\x1b[31m state=failed done=0 checkpoint=none",
        ]
    )
    assert jobctl("list").out == listed.out  # the second call may take the finished one from the summary cache
    assert jobctl("orphans").lines == [f"{odd} kind=a\\nb state=pending checkpoint=none"]
    seen = render.watch_line(store.load(done))
    assert seen == (
        f"{done} kind=c\\x1b[31m state=failed done=0 total=0 owner=host\\n1 error=line one\\nline two\\u2028"
    )
    # What a warm listing prints a finished record from (jobctl.summary.Summary), without reading it.
    kept = summary.Summary(done, "c\x1b[31m", "failed", 0, 0, "host\n1", 1, "line one", None, 0, 0)
    assert render.summary_line(kept) == f"{done} kind=c\\x1b[31m state=failed done=0 checkpoint=none"
    # A listing of thousands renders them together: the same lines, each kind judged once.
    many = [
        kept,
        kept._replace(id="b", kind="backup", checkpoint='{"offset":3}', done=7),
        kept._replace(id="c", kind="a\u2028b", state="complete"),
        kept._replace(id="d", kind="backup", checkpoint=""),
    ]
    assert render.summary_lines(many) == [render.summary_line(one) for one in many]
    assert render.summary_lines([]) == []


def test_word_keeps_printable_text_byte_for_byte() -> None:
    from jobctl.cli.render import word

    for text in ("backup", "nightly backup", "café", "日本", "a\\nb", "'quoted'"):
        assert word(text) is text
    assert word("a\tb\r\n\x00\x7f\x85\u2029") == "a\\tb\\r\\n\\x00\\x7f\\x85\\u2029"


def test_watch_names_a_record_file_whose_name_is_no_id_on_one_line_and_goes_on(jobctl: Jobctl) -> None:
    """A stray ``jobs/a\\nb.json`` is named unreadable, escaped, as any other; it does not end the watch."""
    job = jobctl.submit()
    (jobctl.root / "jobs" / "stray\nname.json").write_bytes(b"garbage")
    ran = jobctl("watch", "--quiet-after", "0.2", "--exit-on-quiet")
    assert ran.code == 0, ran.err
    path = jobctl.root / "jobs" / "stray\\nname.json"
    assert ran.err.splitlines() == [f"jobctl: unreadable: stray\\nname {path}: record is not valid JSON at byte 0"]
    assert ran.lines == [f"{job} kind=test state=pending done=0 total=0 owner=-"]


def test_watch_escapes_an_id_that_holds_a_newline_so_each_change_stays_one_line(jobctl: Jobctl) -> None:
    """A record file another writer named ``x\\ny.json`` holds a record with that id: a listing reads it."""
    job = jobctl.submit()
    jobs = jobctl.root / "jobs"
    (jobs / "x\ny.json").write_bytes((jobs / f"{job}.json").read_bytes().replace(job.encode(), b"x\\ny"))
    ran = jobctl("watch", "--quiet-after", "0.2", "--exit-on-quiet")
    assert ran.code == 0, ran.err
    assert ran.lines == [
        f"{job} kind=test state=pending done=0 total=0 owner=-",
        "x\\ny kind=test state=pending done=0 total=0 owner=-",
    ]
