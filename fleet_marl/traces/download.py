"""Download a full public trace into a folder: resumable, verified, unpacked.

:func:`fetch` does three things, and each failure is a :class:`FetchError` whose message gives
the URL, what was expected, what came, and what to do:

1. It streams ``info.url`` into ``<folder>/<download>.part`` behind a tqdm progress bar. A
   ``.part`` left by a broken download is resumed with an HTTP ``Range: bytes=<have>-``
   request; a server that answers 200 instead of 206 sends the whole file, which is rewritten.
2. It checks the finished download against what the registry pins: its size, its SHA-256, or
   its git object id. A ``.part`` shorter than the pinned size is kept (run again to resume);
   one that is longer or hashes differently is removed.
3. It renames the ``.part`` to ``<download>`` and, when the trace is a member of an archive
   (tar.gz or zip), copies that member out to ``<folder>/<file>``; the archive stays, so the
   Helios clusters (one archive) download once.

A trace already in the folder is not downloaded again, nor is an archive already there. Only
``fleet-marl traces fetch`` and your own code call this; replaying a trace never touches the
network.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from fleet_marl.traces.locate import cache_dir
from fleet_marl.traces.registry import TraceInfo

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60.0


class FetchError(RuntimeError):
    """A trace could not be downloaded, or the download is not the file the registry pins."""


@dataclass(frozen=True)
class Fetched:
    """What :func:`fetch` left in the folder."""

    path: Path  # the trace file, ready to replay
    download: Path  # the downloaded file: the trace itself, or the archive that holds it
    sha256: str  # SHA-256 of the trace file, hex
    verified: bool  # False when the registry pins no size or digest for this trace
    downloaded: bool  # False when the trace was already in the folder


def fetch(info: TraceInfo, folder: str | os.PathLike | None = None, progress: bool = True) -> Fetched:
    """Download ``info``'s full trace into ``folder`` (default :func:`cache_dir`), verify it,
    unpack it if it is in an archive, and say where it is."""
    d = Path(folder).expanduser() if folder is not None else cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    target, download = d / info.file, d / info.download_name
    fresh = not target.is_file()
    if fresh and not download.is_file():
        _download(info, download, progress)
    if fresh and info.member:
        _extract(info, download, target)
    return Fetched(target, download, _digest(target, hashlib.sha256()), _pinned(info), downloaded=fresh)


def _pinned(info: TraceInfo) -> bool:
    return bool(info.size or info.sha256 or info.git_blob)


def _download(info: TraceInfo, dest: Path, progress: bool) -> None:
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    if info.size is None or have < info.size:
        _stream(info, dest, part, have, progress)
    _verify(info, dest, part)
    part.replace(dest)


def _retry(info: TraceInfo, dest: Path, part: Path, why: str) -> str:
    have = part.stat().st_size if part.is_file() else 0
    kept = f"the {have:,} bytes received are kept in {part}; " if have else ""
    return (
        f"could not download {info.name} from {info.url}: {why}. {kept}run 'fleet-marl traces fetch {info.name}' "
        f"again to {'resume' if have else 'retry'}, or download the URL yourself and save it as {dest}"
    )


def _stream(info: TraceInfo, dest: Path, part: Path, have: int, progress: bool) -> None:
    """Append the rest of the file (from byte ``have``) to ``part``."""
    headers = {"User-Agent": "fleet-marl traces fetch"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(info.url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the .part already holds every byte the server has
            return
        raise FetchError(_retry(info, dest, part, f"HTTP {e.code} {e.reason}")) from None
    except OSError as e:  # URLError (no route, DNS, refused) and timeouts
        raise FetchError(_retry(info, dest, part, str(getattr(e, "reason", e)))) from None
    with resp:
        if have and resp.status == 206 and not resp.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
            raise FetchError(_retry(info, dest, part, f"asked for bytes {have}- and got the range {resp.headers.get('Content-Range')!r}"))
        if resp.status != 206:
            have = 0  # a whole file: the server ignored the Range, or there was none
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length else info.size
        with (
            open(part, "ab" if have else "wb") as fh,
            tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=info.name, disable=not progress) as bar,
        ):
            got = 0
            try:
                while chunk := resp.read(CHUNK_BYTES):
                    fh.write(chunk)
                    got += len(chunk)
                    bar.update(len(chunk))
            except (OSError, http.client.HTTPException) as e:
                raise FetchError(_retry(info, dest, part, f"the connection broke ({type(e).__name__})")) from None
        if length and got < int(length):
            raise FetchError(_retry(info, dest, part, f"the server closed the connection after {have + got:,} of {total:,} bytes"))


def _digest(path: Path, h, prefix: bytes = b"") -> str:
    h.update(prefix)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def _verify(info: TraceInfo, dest: Path, part: Path) -> None:
    """Raise FetchError unless ``part`` has the pinned size and digests."""
    size = part.stat().st_size
    if info.size is not None and size < info.size:
        raise FetchError(_retry(info, dest, part, f"the download stopped at {size:,} of {info.size:,} bytes"))
    if info.size is not None and size != info.size:
        _reject(info, part, "size", f"{size:,} bytes", f"{info.size:,} bytes")
    if info.sha256 and (got := _digest(part, hashlib.sha256())) != info.sha256:
        _reject(info, part, "SHA-256", got, info.sha256)
    if info.git_blob and (got := _digest(part, hashlib.sha1(), b"blob %d\0" % size)) != info.git_blob:
        _reject(info, part, "git object id", got, info.git_blob)


def _reject(info: TraceInfo, part: Path, what: str, got: str, expected: str) -> None:
    size = part.stat().st_size
    part.unlink()
    raise FetchError(
        f"{info.name}: the {what} of the download from {info.url} is {got}, expected {expected} "
        f"({size:,} bytes received); it is not the file {info.source} pins, so it was removed. "
        f"Run 'fleet-marl traces fetch {info.name}' again; if it fails the same way, the file at the URL "
        f"has changed: compare it with the source and report it"
    )


def _extract(info: TraceInfo, archive: Path, target: Path) -> None:
    """Copy the archive member ``info.member`` (an exact path or a path suffix) to ``target``."""
    tmp = target.with_name(target.name + ".part")
    seen: list[str] = []

    def match(name: str) -> bool:
        seen.append(name)
        return name == info.member or name.endswith("/" + str(info.member))

    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            name = next((n for n in z.namelist() if match(n)), None)
            if name is not None:
                with z.open(name) as src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out, CHUNK_BYTES)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tar:  # streamed: stops at the member
            name = None
            for m in tar:
                member = tar.extractfile(m) if m.isfile() and match(m.name) else None  # a regular file's data is never None
                if member is not None:
                    name = m.name
                    with member, open(tmp, "wb") as out:
                        shutil.copyfileobj(member, out, CHUNK_BYTES)
                    break
    else:
        raise FetchError(
            f"{info.name}: {archive} is neither a zip nor a tar archive; remove it and run 'fleet-marl traces fetch {info.name}' again"
        )
    if name is None:
        raise FetchError(
            f"{info.name}: {archive} holds no {info.member!r} (it holds {', '.join(seen[:10])}"
            f"{', ...' if len(seen) > 10 else ''}); the archive at {info.url} has changed: report it"
        )
    tmp.replace(target)


__all__ = ["FetchError", "Fetched", "fetch"]
