"""Hugging Face Hub model ids as a MODEL: ``org/name`` or ``org/name@revision``.

The id is checked before any network use, against the rules of huggingface_hub's own
``validate_repo_id`` (``huggingface_hub/utils/_validators.py``: ``REPO_ID_REGEX``, no ``--`` or
``..``, no ``.git`` ending), with one ``/`` required, so that a path (``/abs``, ``../x``,
``a/b/c``) never reaches the Hub.  The model's ``config.json`` is then fetched with
``huggingface_hub.hf_hub_download`` (from its cache alone when ``HF_HUB_OFFLINE`` is set or the
Hub cannot be reached) and read by the same bounded reader as a local file
(:func:`~memsym.model.hf_config.from_hf_config`: parsed as JSON, never evaluated, every size
checked).  huggingface_hub is optional (the ``hf`` extra); without it a Hub id is refused in
one line.  Every failure (a gated or missing repository, a missing revision, no network and no
cached copy) is one line, an :class:`~memsym.errors.InvalidValueError`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Optional

from ..errors import InvalidValueError, MemsymError
from ..limits import MAX_CONFIG_JSON_BYTES, MAX_HUB_NAME_CHARS, MAX_HUB_REVISION_CHARS
from ..text import printable
from .architecture import Architecture, resolve
from .hf_config import from_hf_config

__all__ = ["HubId", "is_hub_spelling", "parse_hub_id", "hub_config_path", "from_hub"]

#: The file fetched from a model repository.
CONFIG_FILE = "config.json"

# One part of a repo id as huggingface_hub's REPO_ID_REGEX accepts it (``\b[\w\-.]{1,96}\b``
# under re.ASCII): ASCII letters, digits, '_', '-', '.', starting and ending with a word
# character (so not with '-' or '.').
_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,%d}[A-Za-z0-9_])?" % (MAX_HUB_NAME_CHARS - 2))
# A revision: a branch, a tag, a commit, or a pull request's ref (refs/pr/1), in the characters
# of git ref names that the Hub's own names use; each '/'-separated component starts with a
# word character, so neither '..' nor a hidden or empty component (git check-ref-format) nor
# an absolute path can be spelled.
_REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
_ACCEPTED = (f"org/name[@revision] (letters, digits, '-', '_', '.'; each part 1-"
             f"{MAX_HUB_NAME_CHARS} characters)")
_TRUE = {"1", "ON", "YES", "TRUE"}   # huggingface_hub.constants._is_true


@dataclasses.dataclass(frozen=True)
class HubId:
    """A checked Hub model id: ``repo_id`` (``org/name``) and an optional ``revision``."""

    repo_id: str
    revision: Optional[str] = None

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")


def is_hub_spelling(text: str) -> bool:
    """Whether a MODEL that names no local file is meant as a Hub id: it has a ``/``.

    A preset name has none; a Hub id has exactly one (more, or a leading one, is refused by
    :func:`parse_hub_id` rather than read as a preset).

    Examples
    --------
    >>> is_hub_spelling("meta-llama/Llama-3.1-8B"), is_hub_spelling("llama3-8b")
    (True, False)
    """
    return isinstance(text, str) and "/" in text


def parse_hub_id(text: str) -> HubId:
    """``text`` checked as ``org/name`` or ``org/name@revision``, before any network use.

    Raises
    ------
    InvalidValueError
        Not a string, too long, a character outside the accepted ones (control characters,
        spaces, non-ASCII), not exactly one ``/`` (an absolute path, ``a/b/c``), ``--`` or
        ``..``, a ``.git`` ending, an empty or malformed revision; the message says what a Hub
        id is and that a local path must exist.

    Examples
    --------
    >>> parse_hub_id("meta-llama/Llama-3.1-8B@main")
    HubId(repo_id='meta-llama/Llama-3.1-8B', revision='main')
    >>> parse_hub_id("../etc/passwd")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: no file or directory '../etc/passwd', and not a Hugging Face Hub model id (more than one '/'): a Hub id is org/name[@revision] ...
    """
    if not isinstance(text, str):
        raise InvalidValueError(f"a Hub model id must be a string, got {type(text).__name__}")
    most = 2 * MAX_HUB_NAME_CHARS + 2 + MAX_HUB_REVISION_CHARS
    if len(text) > most:
        raise _not_hub(text, f"{len(text)} characters, more than a Hub id's {most}")
    repo, at, revision = text.partition("@")
    if at and not revision:
        raise _not_hub(text, "nothing after '@'")
    if repo.count("/") != 1:
        raise _not_hub(text, "more than one '/'" if repo.count("/") > 1 else "no '/'")
    org, _, name = repo.partition("/")
    for part, what in ((org, "organisation"), (name, "name")):
        if not part:
            raise _not_hub(text, f"an empty {what}")
        if len(part) > MAX_HUB_NAME_CHARS:
            raise _not_hub(text, f"the {what} has {len(part)} characters, more than "
                                 f"{MAX_HUB_NAME_CHARS}")
        if not _PART.fullmatch(part):
            raise _not_hub(text, f"the {what} '{printable(part, 40)}' has a character other "
                                 "than a letter, digit, '-', '_' or '.', or starts or ends "
                                 "with '-' or '.'")
    if "--" in repo or ".." in repo:
        raise _not_hub(text, "'--' or '..' in the id")
    if repo.endswith(".git"):
        raise _not_hub(text, "a '.git' ending")
    if at:
        if len(revision) > MAX_HUB_REVISION_CHARS:
            raise _not_hub(text, f"a revision of {len(revision)} characters, more than "
                                 f"{MAX_HUB_REVISION_CHARS}")
        if (not _REVISION.fullmatch(revision) or ".." in revision
                or revision.endswith((".", ".lock"))):
            raise _not_hub(text, f"revision '{printable(revision, 40)}' is not a branch, tag "
                                 "or commit name (letters, digits, '-', '_', '.', '/' between "
                                 "parts, no '..')")
    return HubId(repo, revision or None)


def _not_hub(text: str, why: str) -> InvalidValueError:
    return InvalidValueError(f"no file or directory '{printable(text, 80)}', and not a Hugging "
                             f"Face Hub model id ({why}): a Hub id is {_ACCEPTED}, or give a "
                             "preset (memsym models) or a config.json path")


def _offline(constants) -> bool:
    # HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub.constants reads it, read
    # again now: that module reads the environment once, at import
    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(getattr(constants, "HF_HUB_OFFLINE", False)) or env.upper() in _TRUE


def hub_config_path(hub: HubId, *, cache_dir=None) -> str:
    """The local path of ``hub``'s ``config.json``, fetched or found in the Hub cache.

    Online, the file's size is asked first (``get_hf_file_metadata``) and a file above
    :data:`memsym.limits.MAX_CONFIG_JSON_BYTES` is refused before it is downloaded; then
    ``hf_hub_download(repo_id, "config.json", revision=...)`` fetches it into the cache (or
    finds it there).  With ``HF_HUB_OFFLINE`` set, or when the Hub cannot be reached, only the
    cache is read (``local_files_only=True``).

    Parameters
    ----------
    hub : HubId
        A checked id (:func:`parse_hub_id`).
    cache_dir : str or os.PathLike, optional
        The Hub cache folder (default: huggingface_hub's, ``HF_HUB_CACHE``).

    Raises
    ------
    InvalidValueError
        One line each: huggingface_hub not installed; a gated, missing or private repository;
        a missing revision; no config.json in the repository; a file above the limit; offline
        (or no network) and not cached; any other failure of the fetch.
    """
    try:
        import huggingface_hub as hf
    except ImportError:
        raise InvalidValueError(f"{hub} reads as a Hugging Face Hub model id, which needs "
                                "huggingface_hub: pip install huggingface_hub (or memsym[hf]), "
                                "or pass its config.json path") from None
    from huggingface_hub import constants as hf_constants
    try:    # the error classes: huggingface_hub.errors since 0.24, utils before
        from huggingface_hub import errors as hf_errors
    except ImportError:  # pragma: no cover - an older huggingface_hub
        from huggingface_hub import utils as hf_errors

    offline = _offline(hf_constants)
    reason = "HF_HUB_OFFLINE is set"
    try:
        if not offline:
            try:
                meta = hf.get_hf_file_metadata(hf.hf_hub_url(hub.repo_id, CONFIG_FILE,
                                                             revision=hub.revision))
            except hf_errors.HfHubHTTPError:
                raise                    # the Hub answered: gated, missing, refused (below)
            except Exception as exc:     # no answer (the transport's own errors): the cache
                offline, reason = True, f"the Hub cannot be reached ({_first_line(exc)})"
            else:
                if meta.size is not None and meta.size > MAX_CONFIG_JSON_BYTES:
                    raise InvalidValueError(f"{hub}'s config.json is {meta.size} bytes on the "
                                            "Hub; a config.json is refused above "
                                            f"{MAX_CONFIG_JSON_BYTES} bytes")
        return hf.hf_hub_download(hub.repo_id, CONFIG_FILE, revision=hub.revision,
                                  cache_dir=cache_dir, local_files_only=offline)
    except InvalidValueError:
        raise
    except Exception as exc:
        raise _fetch_error(hub, exc, hf_errors, reason if offline else None) from None


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return printable(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 160)


def _fetch_error(hub: HubId, exc: Exception, errs, offline_reason) -> InvalidValueError:
    """One line for a failed fetch of ``hub``'s config.json, most specific class first."""
    what = getattr(errs, "GatedRepoError", ())
    if isinstance(exc, what):
        return InvalidValueError(f"{hub.repo_id} is gated on the Hub: accept its licence on "
                                 f"https://huggingface.co/{hub.repo_id} and log in (hf auth "
                                 "login, or huggingface-cli login; or set HF_TOKEN), or pass "
                                 "its config.json path")
    if isinstance(exc, getattr(errs, "RepositoryNotFoundError", ())):
        return InvalidValueError(f"no model repository {hub.repo_id} on the Hub (or it is "
                                 "private: log in with hf auth login or set HF_TOKEN), and no "
                                 "local file of that name; give a preset (memsym models), a "
                                 "config.json path or a Hub id")
    if isinstance(exc, getattr(errs, "RevisionNotFoundError", ())):
        return InvalidValueError(f"{hub.repo_id} has no revision {hub.revision!r} on the Hub "
                                 "(a branch, tag or commit)")
    if isinstance(exc, getattr(errs, "LocalEntryNotFoundError", ())) or offline_reason:
        return InvalidValueError(f"{hub}'s config.json is not in the Hugging Face cache and "
                                 f"{offline_reason or 'the Hub cannot be reached'}: fetch it "
                                 "once online, or pass its config.json path")
    if isinstance(exc, getattr(errs, "EntryNotFoundError", ())):
        return InvalidValueError(f"{hub} has no config.json on the Hub (not a transformers "
                                 "model?): pass a config.json path")
    if isinstance(exc, getattr(errs, "HFValidationError", ())):
        return _not_hub(str(hub), _first_line(exc))
    return InvalidValueError(f"cannot fetch {hub}'s config.json from the Hub ({_first_line(exc)})"
                             ": check the network, set HF_HUB_OFFLINE=1 to read the cache, or "
                             "pass its config.json path")


def from_hub(text: str, *, cache_dir=None) -> Architecture:
    """The architecture of a Hub model id's ``config.json``, named after the id.

    ``text`` is checked (:func:`parse_hub_id`) before anything else; the file is fetched or
    found in the cache (:func:`hub_config_path`) and read as a local one
    (:func:`~memsym.model.hf_config.from_hf_config`).

    Parameters
    ----------
    text : str
        ``org/name`` or ``org/name@revision``.
    cache_dir : str or os.PathLike, optional
        The Hub cache folder (default: huggingface_hub's).

    Returns
    -------
    Architecture
        As :func:`~memsym.model.hf_config.from_hf_config` reads the file, its ``name`` the id
        as given.
    """
    hub = parse_hub_id(text)
    path = hub_config_path(hub, cache_dir=cache_dir)
    try:
        arch = from_hf_config(path)
    except MemsymError as exc:
        # the reader names the cached file by its snapshot folder (a commit hash): name the id
        if exc.args and isinstance(exc.args[0], str):
            exc.args = (f"{hub} (its config.json from the Hub): {exc.args[0]}", *exc.args[1:])
        raise
    return resolve(dataclasses.replace(arch, name=str(hub)))
