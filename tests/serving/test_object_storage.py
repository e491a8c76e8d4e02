"""The command line and the file checks on a logdir in object storage (issue 43).

An S3 endpoint served by moto in server mode on 127.0.0.1 (the accepted S3
emulator; boto3 reaches it through ``AWS_ENDPOINT_URL`` as it would reach
any S3-compatible store), with dummy credentials.  A logdir synced to a
bucket (docs/distributed.md) reads as the same logdir on disk.
"""

import json
import os
import subprocess
import sys

import boto3
import pytest
from moto.server import ThreadedMotoServer

from benchmarks import bench_memory
from tb_gradlens import event_files
from tb_gradlens import file_system

BUCKET = "gradlens-logs"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield "http://%s:%d" % (host, port)
    server.stop()


@pytest.fixture
def s3_env(endpoint, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask an instance for credentials
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return endpoint


def _upload(local, prefix):
    """Sync the directory ``local`` to s3://BUCKET/prefix (as `aws s3 sync` does); the URL."""
    client = boto3.client("s3")
    if BUCKET not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket=BUCKET)
    for directory, _, names in os.walk(local):
        for name in names:
            path = os.path.join(directory, name)
            client.upload_file(path, BUCKET, prefix + "/" + os.path.relpath(path, local).replace(os.sep, "/"))
    return "s3://%s/%s" % (BUCKET, prefix)


@pytest.fixture
def synced(s3_env, tmp_path):
    """A local logdir of two runs, and the same synced to s3://BUCKET/logs (as `aws s3 sync` does)."""
    local = tmp_path / "logs"
    for i, run in enumerate(["bf16", "f32"]):
        bench_memory.write_run(str(local / run), 30, 3, False, seed=i)
    return str(local), _upload(str(local), "logs")


_RUN = """
import contextlib, io, json, sys
from tb_gradlens import cli
found = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(argv)
    found.append((status, out.getvalue(), err.getvalue()))
print(json.dumps(found))
"""


def _cli_runs(*argvs):
    """[(exit status, stdout, stderr)] of ``tb-gradlens ARGV`` for each ARGV, in one fresh process, as
    the command runs (TensorBoard's TensorFlow stub, whose file system reads s3:// through boto3; a
    process where TensorBoard already uses TensorFlow reads TensorFlow's file systems, without s3://)."""
    done = subprocess.run([sys.executable, "-c", _RUN, json.dumps([list(a) for a in argvs])], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=dict(os.environ, PYTHONIOENCODING="utf-8"))
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(r) for r in json.loads(done.stdout.splitlines()[-1])]


def _cli(capsys, *argv):
    return _cli_runs(argv)[0]


def test_the_file_checks_read_a_bucket_as_the_directory_synced_to_it(synced):
    local, url = synced
    files, notes = event_files.walk(url)
    assert notes == [] and [run for run, _ in files] == [run for run, _ in event_files.walk(local)[0]]
    for (_, remote), (_, path) in zip(files, event_files.walk(local)[0]):
        scans = event_files.FileScan(remote), event_files.FileScan(path)
        for scan in scans:
            scan.advance()
        assert [(s.records, s.step_min, s.step_max, s.damage, s.truncated) for s in scans].count(
            (scans[1].records, scans[1].step_min, scans[1].step_max, None, False)) == 2


@pytest.mark.parametrize("command", [["report"], ["export", "--format", "csv"], ["advise"],
                                     ["compare", "{}", "bf16", "f32", "--kind", "grad_stats", "--row", "model/block_001/dense/kernel"]],
                         ids=["report", "export", "advise", "compare"])
def test_each_command_reads_a_bucket_as_the_directory_synced_to_it(synced, capsys, command):
    local, url = synced

    def argv(logdir):
        if command[0] == "compare":
            return ["compare", logdir] + command[2:] + ["--json"]
        return [command[0], logdir] + command[1:] + (["--json"] if command[0] in ("report", "advise") else [])

    (status, out, err), from_bucket = _cli_runs(argv(local), argv(url))
    assert from_bucket == (status, out.replace(local, url), err.replace(local, url))
    assert status in (0, 1) or command[0] == "advise" and "no run with precision advisor records" in err


def test_a_missing_bucket_is_cannot_read_never_does_not_exist(s3_env, capsys):
    status, out, err = _cli(capsys, "report", "s3://no-such-bucket-here/logs")
    assert status == 3 and out == ""
    assert err.count("\n") == 1 and "cannot read s3://no-such-bucket-here/logs" in err and "NoSuchBucket" in err
    assert "does not exist" not in err


def test_no_credentials_is_cannot_read_never_does_not_exist(s3_env, capsys, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    status, out, err = _cli(capsys, "report", "s3://%s/logs" % BUCKET)
    assert status == 3 and "cannot read s3://%s/logs: no AWS credentials" % BUCKET in err
    assert "does not exist" not in err


def test_an_unreachable_endpoint_is_cannot_read(s3_env, capsys, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the discard port: refused at once
    status, _, err = _cli(capsys, "report", "s3://%s/logs" % BUCKET)
    assert status == 3 and "cannot read s3://%s/logs" % BUCKET in err


def test_another_scheme_goes_through_fsspec(tmp_path):
    """``memory://`` (fsspec's own): the path gs:// takes where gcsfs is installed."""
    import fsspec

    memory = fsspec.filesystem("memory")
    bench_memory.write_run(str(tmp_path / "run"), 10, 2, False)
    name = os.listdir(tmp_path / "run")[0]
    memory.pipe("/gl/logs/run/" + name, (tmp_path / "run" / name).read_bytes())
    files, _ = event_files.walk("memory://gl/logs")
    assert files == [("run", "memory://gl/logs/run/" + name)]
    scan = event_files.FileScan(files[0][1])
    scan.advance()
    assert (scan.records, scan.step_max, scan.damage) == (11, 9, None)
    with pytest.raises(file_system.CannotRead, match="cannot read"):
        event_files.walk("nosuchscheme://bucket/logs")


def test_the_tabs_file_checks_name_damage_and_two_writers_in_a_bucket_as_on_disk(s3_env, tmp_path):
    """The plugin's checks behind the runs and alerts routes on a logdir synced
    to a bucket: a flipped byte and two overlapping writers are named there
    with the same files and words as on the directory (the plugin checked
    local logdirs only)."""
    from tensorboard.plugins import base_plugin

    from tb_gradlens.serving.gradlens_plugin import GradLensPlugin
    from tests.support import hostile_logs

    local = tmp_path / "logs"
    hostile_logs.flipped_run(str(local / "flipped"))
    hostile_logs.two_writers_run(str(local / "two"))
    url = _upload(str(local), "damaged")

    def problems(logdir):
        plugin = GradLensPlugin(base_plugin.TBContext(logdir=logdir, data_provider=None))
        plugin._monitor.interval = 0
        return plugin._file_problems()

    on_disk, in_bucket = problems(str(local)), problems(url)
    assert sorted(on_disk) == ["flipped", "two"]
    assert json.dumps(in_bucket, sort_keys=True) == json.dumps(on_disk, sort_keys=True).replace(str(local), url)
    assert "both hold steps" in in_bucket["two"][0]["error"]
