"""Where a lake lives: a local folder or an object store (``s3://bucket/prefix``).

A lake path is either a folder on this machine or a URL of a store that delta-rs and
pyiceberg both reach (``s3://``, ``s3a://``, ``gs://``, ``az://``, ``abfs[s]://``).  This
module turns the node's ini settings (``lake_s3_*``) and the standard ``AWS_*`` environment
into the options each library wants (delta-rs's ``storage_options``, pyiceberg's FileIO
properties, pyarrow's ``S3FileSystem``), checks at ``add-table`` that the path can be
written, and masks the secrets in every message (:func:`mask`).  The options travel in a
:class:`~pgferry.lake.spec.LakeSpec` (never in the registry: the ini or the environment
is read again by every command).

Delta on S3: pgferry asks delta-rs for conditional puts (``conditional_put = etag``, an
``If-None-Match`` PUT of the commit file) so two writers of one version never both win,
without a lock table; see ``docs/lakehouse.md`` (*Object storage*).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlparse

from pgferry import settings
from pgferry.lake.spec import LakeError

if TYPE_CHECKING:  # pyarrow: imported where a file system is made
    from pyarrow import fs as pafs

T = TypeVar("T")

REMOTE_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")
# ini setting -> (delta-rs / object_store key, the environment variables read when unset)
_S3_SETTINGS = (
    (settings.LAKE_S3_ENDPOINT, "AWS_ENDPOINT_URL", ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")),
    (settings.LAKE_S3_REGION, "AWS_REGION", ("AWS_REGION", "AWS_DEFAULT_REGION")),
    (settings.LAKE_S3_ACCESS_KEY_ID, "AWS_ACCESS_KEY_ID", ("AWS_ACCESS_KEY_ID",)),
    (settings.LAKE_S3_SECRET_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY", ("AWS_SECRET_ACCESS_KEY",)),
    (settings.LAKE_S3_SESSION_TOKEN, "AWS_SESSION_TOKEN", ("AWS_SESSION_TOKEN",)),
)
SECRET_KEYS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
DEFAULT_TIMEOUT = settings.LAKE_TIMEOUT.fixed  # seconds one request may take

Options = tuple[tuple[str, str], ...]


def is_remote(path: str) -> bool:
    """Whether ``path`` names an object store (a URL of a scheme other than file)."""
    return "://" in path and urlparse(path).scheme.lower() in REMOTE_SCHEMES


def check_scheme(path: str) -> None:
    """LakeError for a URL of a scheme no lake library reaches (taken for a folder
    before: ``s3:`` in the current directory)."""
    if "://" not in path:
        return
    scheme = urlparse(path).scheme.lower()
    if scheme != "file" and scheme not in REMOTE_SCHEMES:
        raise LakeError(
            f"lake path {path}: unknown scheme {scheme}:// (known: a folder, file://,"
            f" {', '.join(s + '://' for s in REMOTE_SCHEMES)})"
        )


def root_of(path: str) -> str:
    """The lake's root as stored with a table: a remote URL without its trailing slash,
    a local folder made absolute (``file://`` taken off)."""
    check_scheme(path)
    if is_remote(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme.lower()}://{rest.rstrip('/')}"
    if path.startswith("file://"):
        path = urlparse(path).path
    return os.path.abspath(path)


def join(root: str, *parts: str) -> str:
    """A path under ``root``: ``/`` between the parts of a URL, the OS's otherwise."""
    if is_remote(root):
        return "/".join([root.rstrip("/"), *parts])
    return os.path.join(root, *parts)


def options(config: settings.Config | Mapping[str, str] | None) -> Options:
    """The store's options from the ini (``lake_s3_*``, ``lake_timeout``: a Config, or a
    mapping of those keys to their text, as the Spark reader's options give them) or, for
    each one not set there, the ``AWS_*`` environment: delta-rs's keys, as a hashable
    tuple."""

    def read(setting: settings.Setting[T]) -> T:
        if config is None:
            return setting.fixed
        if isinstance(config, Mapping):
            return settings.from_values(config, setting)
        return config.get(setting)

    found: dict[str, str] = {}
    for setting, key, env in _S3_SETTINGS:
        value = read(setting)
        if not value:
            value = next((os.environ[e] for e in env if os.environ.get(e)), "")
        if value:
            found[key] = value
    endpoint = found.get("AWS_ENDPOINT_URL", "")
    allow = read(settings.LAKE_S3_ALLOW_HTTP) or os.environ.get("AWS_ALLOW_HTTP", "")
    if allow.lower() in ("1", "true", "yes", "on") or endpoint.startswith("http://"):
        found["AWS_ALLOW_HTTP"] = "true"
    found["timeout"] = f"{max(1, read(settings.LAKE_TIMEOUT))}s"
    return tuple(sorted(found.items()))


def delta_options(opts: Options) -> dict[str, str]:
    """delta-rs's ``storage_options``: conditional puts of the commit file (no lock
    table; the store refuses a second writer of one version), and the request timeout."""
    out = dict(opts)
    out.setdefault("conditional_put", "etag")
    # A request that stalls fails after "timeout"; its retries end within as long again,
    # so a stalled store fails the batch in about twice lake_timeout (then retried).
    out.setdefault("max_retries", "2")
    out.setdefault("retry_timeout", out.get("timeout", f"{DEFAULT_TIMEOUT}s"))
    return out


def iceberg_properties(opts: Options) -> dict[str, str]:
    """pyiceberg's FileIO properties of the same store."""
    names = {
        "AWS_ENDPOINT_URL": "s3.endpoint", "AWS_REGION": "s3.region",
        "AWS_ACCESS_KEY_ID": "s3.access-key-id",
        "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
        "AWS_SESSION_TOKEN": "s3.session-token",
    }  # fmt: skip
    props = {names[k]: v for k, v in opts if k in names}
    seconds = dict(opts).get("timeout", f"{DEFAULT_TIMEOUT}s").rstrip("s")
    props["s3.request-timeout"] = seconds
    props["s3.connect-timeout"] = seconds
    # pyarrow's reads and writes (the default FileIO is pyarrow's for s3://)
    props["py-io-impl"] = "pyiceberg.io.pyarrow.PyArrowFileIO"
    return props


def filesystem(path: str, opts: Options) -> tuple[pafs.FileSystem, str]:
    """(pyarrow file system, the path in it) of a folder or URL: the initial load's
    tasks write their Parquet files through it."""
    from pyarrow import fs

    if not is_remote(path):
        return fs.LocalFileSystem(), root_of(path)
    url = urlparse(path)
    if url.scheme.lower() not in ("s3", "s3a"):
        found, inner = fs.FileSystem.from_uri(path)
        return found, inner
    given = dict(opts)
    endpoint = given.get("AWS_ENDPOINT_URL", "")
    kwargs: dict[str, object] = {}
    if endpoint:
        parsed = urlparse(endpoint)
        kwargs["endpoint_override"] = parsed.netloc or endpoint
        kwargs["scheme"] = parsed.scheme or "https"
    if given.get("AWS_REGION"):
        kwargs["region"] = given["AWS_REGION"]
    if given.get("AWS_ACCESS_KEY_ID"):
        kwargs["access_key"] = given["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = given.get("AWS_SECRET_ACCESS_KEY", "")
        if given.get("AWS_SESSION_TOKEN"):
            kwargs["session_token"] = given["AWS_SESSION_TOKEN"]
    seconds = float(given.get("timeout", f"{DEFAULT_TIMEOUT}s").rstrip("s"))
    kwargs["request_timeout"] = seconds
    kwargs["connect_timeout"] = min(seconds, 10.0)
    kwargs["retry_strategy"] = fs.AwsStandardS3RetryStrategy(max_attempts=2)
    return fs.S3FileSystem(**kwargs), f"{url.netloc}{url.path}".rstrip("/")


def is_dir(path: str, opts: Options) -> bool:
    """Whether anything is stored under ``path`` (a folder, or a prefix of a store)."""
    if not is_remote(path):
        return os.path.isdir(path)
    from pyarrow import fs as pafs

    store, inner = filesystem(path, opts)
    try:
        listed = store.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    except OSError as exc:
        raise LakeError(
            f"lake path {mask(path, opts)} cannot be read: {reason(exc, opts)}"
        ) from None
    return bool(listed)


def writable(path: str, opts: Options) -> None:
    """LakeError (one line naming the path) unless a file can be written and removed
    under ``path``: a missing bucket, refused credentials or an endpoint that does not
    answer are found here, before anything is registered."""
    if not is_remote(path):
        from pgferry.lake.spec import writable as local_writable

        local_writable(path)
        return
    store, inner = filesystem(path, opts)
    probe = f"{inner}/.pgferry-probe-{os.getpid()}"
    try:
        with store.open_output_stream(probe) as out:
            out.write(b"")
        store.delete_file(probe)
    except OSError as exc:
        raise LakeError(
            f"lake path {mask(path, opts)} cannot be written: {reason(exc, opts)}"
        ) from None


def reason(exc: BaseException, opts: Options) -> str:
    """The first line of a library's error that says something, secrets masked."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # delta-rs colours its error chain
    lines = [ln.strip(" ↳\t") for ln in plain.splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    if "AWS Error " in text:  # pyarrow: "When ... in bucket 'b': AWS Error X during ..."
        text = "AWS Error " + text.split("AWS Error ", 1)[1]
    text = re.sub(r"\s*\(Request ID: [^)]*\)", "", text)
    return mask(text, opts)


def mask(text: str, opts: Options | Mapping[str, str] | Sequence[tuple[str, str]] = ()) -> str:
    """``text`` with every secret of ``opts`` (and of the environment) replaced by
    ``[...]``."""
    given = dict(opts)
    secrets = [given.get(k, "") for k in SECRET_KEYS]
    secrets += [os.environ.get(k, "") for k in SECRET_KEYS]
    for secret in sorted({s for s in secrets if len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, "[...]")
    return text
