"""The files of a logdir wherever they are: a local directory, or object storage.

TensorFlow-free.  One layer for what reads event files byte by byte
(``event_files``: the walk and the checks; ``serving.checked_reader``; the
command line's ``serving.logdir``): ``for_path(path)`` gives the file
system of a path.

* a local path: ``os`` (the walk that follows symlinks and skips loops
  stays ``event_files.walk``'s);
* ``s3://bucket/prefix``: boto3 (installed by the user; the endpoint of an
  S3-compatible store from ``AWS_ENDPOINT_URL``, credentials as boto3
  finds them), objects read by ranged GETs;
* another ``scheme://`` URL (``gs://`` with gcsfs installed, ``memory://``):
  fsspec, where installed.

A bucket that is missing or refused, missing credentials, an unreachable
endpoint: ``CannotRead``, whose message says which, within seconds (5 s to
connect, 20 s to read, 2 attempts), never a hang.
"""

import os
import posixpath

CONNECT_SECONDS = 5
READ_SECONDS = 20
ATTEMPTS = 2


class CannotRead(OSError):
    """A logdir or file of object storage that cannot be read, and why."""


def is_remote(path):
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    return "://" in str(path) and not str(path).startswith("file://")


def for_path(path):
    """The file system of ``path``: LOCAL, an S3FileSystem or an FsspecFileSystem."""
    if not is_remote(path):
        return LOCAL
    scheme = str(path).split("://", 1)[0].lower()
    if scheme == "s3":
        # One client per process and configuration (AWS_* variables): boto3 finds credentials once per session.
        key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        if key not in _S3:
            _S3.clear()
            _S3[key] = S3FileSystem()
        return _S3[key]
    return FsspecFileSystem(scheme)


_S3 = {}


def size(path):
    """The size of a file, in bytes (OSError if it cannot be read)."""
    return for_path(path).size(path)


def open_file(path):
    """A binary file object of ``path`` (``seek``, ``read``, ``close``; a context manager)."""
    return for_path(path).open(path)


def stat(path):
    """(size, a change stamp) of a file: mtime_ns for a local one, the object's modification time remote."""
    return for_path(path).stat(path)


class LocalFileSystem:
    remote = False

    def size(self, path):
        return os.path.getsize(path)

    def stat(self, path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns

    def open(self, path):
        return open(path, "rb")


LOCAL = LocalFileSystem()


class _RangeReader:
    """A read-only file over ``read_range(start, end)`` (ranged GETs)."""

    def __init__(self, read_range, length):
        self._read_range = read_range
        self._length = length
        self._pos = 0

    def seek(self, pos, whence=0):
        self._pos = pos if whence == 0 else (self._pos + pos if whence == 1 else self._length + pos)
        return self._pos

    def tell(self):
        return self._pos

    def read(self, n=-1):
        end = self._length if n is None or n < 0 else min(self._length, self._pos + n)
        if end <= self._pos:
            return b""
        data = self._read_range(self._pos, end)
        self._pos += len(data)
        return data

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _url_parts(url):
    """(scheme, bucket, key) of ``scheme://bucket/key``."""
    scheme, rest = url.split("://", 1)
    bucket, _, key = rest.partition("/")
    return scheme, bucket, key


class S3FileSystem:
    """``s3://`` through boto3; every failure is a ``CannotRead`` that says why."""

    remote = True

    def __init__(self):
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise CannotRead("cannot read s3:// paths: boto3 is not installed (pip install boto3)") from None
        config = Config(connect_timeout=CONNECT_SECONDS, read_timeout=READ_SECONDS,
                        retries={"total_max_attempts": ATTEMPTS, "mode": "standard"})
        self._client = boto3.session.Session().client("s3", config=config)

    def _call(self, url, method, **kwargs):
        import botocore.exceptions as bex

        try:
            return getattr(self._client, method)(**kwargs)
        except bex.NoCredentialsError:
            raise CannotRead("cannot read %s: no AWS credentials (set AWS_ACCESS_KEY_ID and "
                             "AWS_SECRET_ACCESS_KEY, or a profile)" % url) from None
        except bex.ClientError as e:
            error = e.response.get("Error", {})
            code, message = error.get("Code", "?"), error.get("Message", "")
            if code in ("NoSuchBucket",):
                why = "bucket %r not found (NoSuchBucket)" % kwargs.get("Bucket")
            elif code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                why = "access refused (%s%s)" % (code, ": " + message if message else "")
            elif code in ("404", "NoSuchKey"):
                why = "no such object (%s)" % code
            else:
                why = "%s%s" % (code, ": " + message if message else "")
            raise CannotRead("cannot read %s: %s" % (url, why)) from None
        except (bex.BotoCoreError, OSError) as e:  # unreachable endpoint, timeouts, bad URL
            raise CannotRead("cannot read %s: %s" % (url, e)) from None

    def walk(self, root):
        """Sorted [(run, url)] of the event files under ``root`` (run "." for those directly in it)."""
        _, bucket, key = _url_parts(root.rstrip("/"))
        prefix = key + "/" if key else ""
        found, token = [], None
        while True:
            kwargs = dict(Bucket=bucket, Prefix=prefix)
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call(root, "list_objects_v2", **kwargs)
            for item in page.get("Contents", []):
                relative = item["Key"][len(prefix):]
                directory, name = posixpath.split(relative)
                if "tfevents" in name:
                    found.append((directory or ".", "s3://%s/%s" % (bucket, item["Key"])))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return sorted(found)

    def size(self, url):
        return self.stat(url)[0]

    def stat(self, url):
        _, bucket, key = _url_parts(url)
        head = self._call(url, "head_object", Bucket=bucket, Key=key)
        return int(head["ContentLength"]), int(head["LastModified"].timestamp() * 1e9)

    def open(self, url):
        _, bucket, key = _url_parts(url)

        def read_range(start, end):
            body = self._call(url, "get_object", Bucket=bucket, Key=key, Range="bytes=%d-%d" % (start, end - 1))
            return body["Body"].read()

        return _RangeReader(read_range, self.size(url))


class FsspecFileSystem:
    """Another ``scheme://`` through fsspec (``gs://`` with gcsfs installed)."""

    remote = True

    def __init__(self, scheme):
        try:
            import fsspec

            self._fs = fsspec.filesystem(scheme)
        except (ImportError, ValueError) as e:
            raise CannotRead("cannot read %s:// paths: %s (pip install fsspec and its %s package)"
                             % (scheme, e, scheme)) from None
        self._scheme = scheme

    def _call(self, url, function, *args):
        try:
            return function(*args)
        except FileNotFoundError:
            raise CannotRead("cannot read %s: not found" % url) from None
        except Exception as e:  # noqa: BLE001 - every backend's failure, said in one line
            raise CannotRead("cannot read %s: %s: %s" % (url, type(e).__name__, e)) from None

    def _url(self, path):
        return path if "://" in path else "%s://%s" % (self._scheme, path.lstrip("/"))

    def walk(self, root):
        root = root.rstrip("/")
        base = self._fs._strip_protocol(root)
        found = []
        for path in self._call(root, self._fs.find, root):
            relative = posixpath.relpath(self._fs._strip_protocol(path), base)
            directory, name = posixpath.split(relative)
            if "tfevents" in name:
                found.append((directory or ".", self._url(self._fs._strip_protocol(path))))
        return sorted(found)

    def size(self, url):
        return int(self._call(url, self._fs.size, url))

    def stat(self, url):
        info = self._call(url, self._fs.info, url)
        stamp = info.get("mtime") or info.get("updated") or info.get("created") or 0
        return int(info["size"]), stamp if isinstance(stamp, (int, float)) else hash(str(stamp))

    def open(self, url):
        return self._call(url, self._fs.open, url, "rb")
