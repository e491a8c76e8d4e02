"""A real ``tensorboard`` process on 127.0.0.1 for end-to-end tests.

Usage::

    with TensorBoardProcess(logdir, load_fast=True) as tb:
        data = tb.get_json("/data/plugins_listing")
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

_URL = re.compile(r"(http://127\.0\.0\.1:\d+/)")


class TensorBoardProcess:
    """Starts ``python -m tensorboard.main`` with --port 0 and finds its URL."""

    def __init__(self, logdir, load_fast=False, extra_args=(), timeout=90, python=None, cwd=None):
        self.logdir = logdir
        self.python = python or sys.executable
        self.cwd = cwd
        self.load_fast = load_fast
        self.extra_args = list(extra_args)
        self.timeout = timeout
        self.process = None
        self.url = None
        self._log = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        args = [
            self.python,
            "-m",
            "tensorboard.main",
            "--logdir",
            self.logdir,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--reload_interval",
            "1",
            "--load_fast",
            "true" if self.load_fast else "false",
        ] + self.extra_args
        self._log_path = os.path.join(
            os.path.dirname(os.path.abspath(self.logdir)), "tensorboard-%d.log" % id(self)
        )
        self._log = open(self._log_path, "w+")
        self.process = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, text=True, cwd=self.cwd
        )
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("tensorboard exited:\n" + self.output())
            match = _URL.search(self.output())
            if match:
                self.url = match.group(1).rstrip("/")
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("tensorboard did not start in time:\n" + self.output())

    def output(self):
        self._log.flush()
        with open(self._log_path) as f:
            return f.read()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self._log:
            self._log.close()
            self._log = None

    def get(self, path, timeout=60, headers=None):
        """(status, content_type, body bytes) of GET path (socket timeout: raises)."""
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=headers or {}),
                                        timeout=timeout) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read()

    def get_json(self, path):
        status, _, body = self.get(path)
        if status != 200:
            raise AssertionError("GET %s -> %d: %s" % (path, status, body[:500]))
        return json.loads(body)

    def wait_for(self, predicate, path, timeout=60):
        """Poll GET path (JSON) until predicate(data) is true; returns data."""
        deadline = time.time() + timeout
        data = None
        while time.time() < deadline:
            status, _, body = self.get(path)
            if status == 200:
                data = json.loads(body)
                if predicate(data):
                    return data
            time.sleep(0.5)
        raise AssertionError("timed out waiting on %s; last: %r" % (path, data))
