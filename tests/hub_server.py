"""A fake Hugging Face Hub for *models* on 127.0.0.1, in the URL layout ``huggingface_hub``'s
``snapshot_download`` uses (read from its installed source, version 2.x):

- ``GET /api/models/{repo}[/revision/{rev}]``: repo info; ``sha`` is the commit ``rev`` resolves to
- ``GET /api/models/{repo}/tree/{commit}[/{dir}]?recursive=true``: the files at that commit
- ``GET|HEAD /{repo}/resolve/{rev}/{path}``: file bytes, with ``X-Repo-Commit`` and ``ETag``
  (the git blob id), and byte ranges

Each repo has commits (``{commit: {path: bytes}}``) and refs (``{"main": commit, ...}``); unknown
repos, revisions and files answer 404 with the ``X-Error-Code`` the client maps to its errors.
Start it with ``remote_servers.serve(hub)`` and point ``HF_ENDPOINT`` (or
``huggingface_hub.constants.ENDPOINT``) at the URL.

>>> hub = FakeModelHub({"org/m": {"a" * 40: {"config.json": b"{}"}}})
>>> hub.refs["org/m"]["main"] == "a" * 40
True
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlsplit

from remote_servers import Files, _Handler


class FakeModelHub:
    """Model repos at several commits (see the module docstring). ``log`` records every
    request; ``online`` False makes every request fail with 503 (the Hub down)."""

    def __init__(self, repos: dict[str, dict[str, dict[str, bytes]]],
                 refs: dict[str, dict[str, str]] | None = None) -> None:  # fmt: skip
        self.commits = {
            repo: {c: Files(f) for c, f in commits.items()} for repo, commits in repos.items()
        }
        self.refs = {repo: {"main": list(commits)[-1]} for repo, commits in repos.items()}
        for repo, named in (refs or {}).items():
            self.refs[repo].update(named)
        self.log = Files({})
        self.online = True

    def commit(self, repo: str, revision: str | None) -> str | None:
        revision = revision or "main"
        if revision in self.commits.get(repo, {}):
            return revision
        return self.refs.get(repo, {}).get(revision)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(_Handler):
            store = hub.log

            def _error(self, status: int, code: str, message: str) -> None:
                body = json.dumps({"error": message}).encode()
                self._send(status, body, {"X-Error-Code": code, "Content-Type": "application/json"})

            def _json(self, value) -> None:
                self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

            def _files(self, repo: str, revision: str | None) -> tuple[str, Files] | None:
                if repo not in hub.commits:
                    self._error(404, "RepoNotFound", f"Repository {repo} not found")
                    return None
                commit = hub.commit(repo, revision)
                if commit is None:
                    self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                    return None
                return commit, hub.commits[repo][commit]

            def do_GET(self):
                self._record()
                if not hub.online:
                    self._error(503, "ServiceUnavailable", "the fake Hub is down")
                    return
                url = urlsplit(self.path)
                path = unquote(url.path)
                recursive = parse_qs(url.query).get("recursive", ["false"])[0].lower() == "true"
                if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
                    found = self._files(m.group(1), m.group(2))
                    if found is not None:
                        commit, files = found
                        siblings = [{"rfilename": p} for p in sorted(files.files)]
                        self._json({"id": m.group(1), "modelId": m.group(1), "sha": commit,
                                    "private": False, "siblings": siblings})  # fmt: skip
                elif m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path):
                    found = self._files(m.group(1), m.group(2))
                    if found is None:
                        return
                    prefix = (m.group(3) or "").strip("/")
                    prefix = prefix + "/" if prefix else ""
                    entries = [
                        {"type": "file", "path": p, "size": len(d), "oid": Files.oid(d)}
                        for p, d in sorted(found[1].files.items())
                        if p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :])
                    ]
                    self._json(entries)
                elif m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                    found = self._files(m.group(1), m.group(2))
                    if found is None:
                        return
                    commit, files = found
                    data = files.files.get(m.group(3))
                    if data is None:
                        self._error(404, "EntryNotFound", f"{m.group(3)} does not exist")
                        return
                    self.store = files
                    headers = {"ETag": f'"{Files.oid(data)}"', "X-Repo-Commit": commit}
                    self._send_file(m.group(3), data, headers)
                else:
                    self._error(404, "EntryNotFound", f"no route for {path}")

            do_HEAD = do_GET

        return Handler
