"""Open skill sources (``SkillSourceSpec``) as directories on local disk.

Each scheme maps to an opener that returns a ``SkillRoot``: a directory whose
immediate subdirectories are skills, and the temporary directory to delete
when the skills are no longer needed (for a ``.zip``, a package that is not
on disk, or a download). The schemes are Flink Agents 0.3.1's Python ones:
``local``, ``package`` and ``url``.
"""

from __future__ import annotations

import importlib
import importlib.resources
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional

from flink_agents.api.redaction import redact_text
from flink_agents.api.skills import SkillSourceSpec

__all__ = ["SkillRoot", "SkillSourceError", "open_source", "SCHEMES", "URL_TIMEOUT_S", "MAX_DOWNLOAD_BYTES", "MAX_EXTRACTED_BYTES"]

URL_TIMEOUT_S = 60.0
MAX_DOWNLOAD_BYTES = 64 * 1024 * 1024
MAX_EXTRACTED_BYTES = 256 * 1024 * 1024
_TEMP_PREFIX = "flink-agents-skills-"


class SkillSourceError(ValueError):
    """A skill source cannot be opened: unknown scheme, missing parameter,
    missing path or package, not a directory or ``.zip``, an unsafe zip
    entry, or a failed download. The message names the source."""


@dataclass
class SkillRoot:
    """A source opened on local disk.

    Attributes:
        directory: Absolute, resolved directory holding the skill directories.
        origin: ``scheme:location``, for messages.
        temporary: A directory this root owns (deleted by ``close``), if any.
    """

    directory: Path
    origin: str
    temporary: Optional[Path] = None

    def close(self) -> None:
        """Delete the owned temporary directory, if any. Idempotent."""
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)
            self.temporary = None


def _temp_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX)).resolve()


def _extract_zip(archive: Any, origin: str) -> SkillRoot:
    """Extract ``archive`` (a path or a binary file object) into a new
    temporary directory, refusing any entry that would land outside it."""
    target = _temp_dir()
    try:
        with zipfile.ZipFile(archive) as zipped:
            for entry in zipped.infolist():
                destination = (target / entry.filename).resolve()
                if not destination.is_relative_to(target):
                    raise SkillSourceError(f"{origin}: zip entry {entry.filename!r} would be written outside the extraction directory")
            expanded = sum(entry.file_size for entry in zipped.infolist())
            if expanded > MAX_EXTRACTED_BYTES:
                raise SkillSourceError(f"{origin}: the zip expands to {expanded} bytes; at most {MAX_EXTRACTED_BYTES} are extracted")
            zipped.extractall(target)
    except zipfile.BadZipFile as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise SkillSourceError(f"{origin}: not a valid .zip file ({exc})") from None
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return SkillRoot(directory=target, origin=origin, temporary=target)


def _require(params: Mapping[str, str], scheme: str, key: str) -> str:
    value = params.get(key)
    if not value:
        raise SkillSourceError(f"skill source '{scheme}' needs the parameter {key!r}; got {dict(params)}")
    return value


def _open_local(params: Mapping[str, str]) -> SkillRoot:
    given = _require(params, "local", "path")
    path = Path(given).expanduser().resolve()
    origin = f"local:{given}"
    if path.is_dir():
        return SkillRoot(directory=path, origin=origin)
    if path.is_file() and path.suffix.lower() == ".zip":
        return _extract_zip(path, origin)
    if not path.exists():
        raise SkillSourceError(f"{origin}: {path} does not exist (on the host that runs the agent)")
    raise SkillSourceError(f"{origin}: {path} is neither a directory nor a .zip file")


def _copy_tree(source: Any, target: Path) -> None:
    """Copy an ``importlib.resources`` Traversable tree (e.g. inside a zipped
    package) into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for child in source.iterdir():
        if child.is_dir():
            _copy_tree(child, target / child.name)
        else:
            (target / child.name).write_bytes(child.read_bytes())


def _open_package(params: Mapping[str, str]) -> SkillRoot:
    package = _require(params, "package", "package")
    resource = _require(params, "package", "resource")
    origin = f"package:{package}/{resource}"
    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        raise SkillSourceError(f"{origin}: package {package!r} cannot be imported ({exc})") from None
    # A module, not a package: refused on every Python (from 3.12 files() would
    # take the directory of the module's own package instead).
    if not hasattr(module, "__path__"):
        raise SkillSourceError(f"{origin}: {package!r} is not a package (a module: {module.__name__})")
    found = importlib.resources.files(module).joinpath(resource)
    if isinstance(found, Path):  # a package installed as files: read in place
        if found.is_dir():
            return SkillRoot(directory=found.resolve(), origin=origin)
        if found.is_file() and found.suffix.lower() == ".zip":
            return _extract_zip(found, origin)
        return _missing(origin, package, resource)
    if found.is_dir():
        target = _temp_dir()
        try:
            _copy_tree(found, target)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return SkillRoot(directory=target, origin=origin, temporary=target)
    if found.is_file() and resource.lower().endswith(".zip"):
        with found.open("rb") as archive:
            return _extract_zip(archive, origin)
    return _missing(origin, package, resource)


def _missing(origin: str, package: str, resource: str) -> SkillRoot:
    raise SkillSourceError(f"{origin}: package {package!r} has no directory or .zip {resource!r}")


def _open_url(params: Mapping[str, str]) -> SkillRoot:
    url = _require(params, "url", "url")
    origin = f"url:{redact_text(url)}"  # messages and logs: no password or ?token=
    if not url.lower().startswith(("http://", "https://")):
        raise SkillSourceError(f"{origin}: only http(s) URLs are supported")
    with tempfile.TemporaryFile() as archive:
        try:
            with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as response:  # noqa: S310 (scheme checked)
                copied = 0
                while chunk := response.read(1 << 20):
                    copied += len(chunk)
                    if copied > MAX_DOWNLOAD_BYTES:
                        raise SkillSourceError(f"{origin}: download is larger than {MAX_DOWNLOAD_BYTES} bytes")
                    archive.write(chunk)
        except (urllib.error.URLError, OSError) as exc:
            raise SkillSourceError(f"{origin}: download failed ({exc})") from None
        archive.seek(0)
        return _extract_zip(archive, origin)


SCHEMES: Dict[str, Callable[[Mapping[str, str]], SkillRoot]] = {
    "local": _open_local,
    "package": _open_package,
    "url": _open_url,
}


def open_source(spec: SkillSourceSpec) -> SkillRoot:
    """Open ``spec`` on local disk.

    Raises:
        SkillSourceError: Unknown scheme (the message lists the known ones,
            e.g. for Flink Agents' Java-only ``classpath``), or the source
            cannot be opened.
    """
    opener = SCHEMES.get(spec.scheme)
    if opener is None:
        raise SkillSourceError(f"unknown skill source scheme {spec.scheme!r}; this runtime reads {sorted(SCHEMES)}")
    return opener(spec.params)
