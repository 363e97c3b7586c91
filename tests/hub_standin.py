"""A local stand-in for the Hugging Face hub: folders served over HTTP with the few endpoints that
`huggingface_hub.snapshot_download` and `datasets.load_dataset` call (no hub is reachable here). Point HF_ENDPOINT
at `url` and they fetch from it as from huggingface.co.

    GET  /api/{models,datasets}/REPO[/revision/REV]          repository info: its commit and files
    GET  /api/{models,datasets}/REPO/tree/REV[/PATH]         a folder's entries (?recursive=true: all below it)
    POST /api/{models,datasets}/REPO/paths-info/REV          the entries of the paths asked for
    HEAD, GET /REPO/resolve/REV/FILE, /datasets/REPO/resolve/REV/FILE   a file, with X-Repo-Commit and ETag

Anything else is a 404 with the hub's X-Error-Code; every request is kept in `requests`."""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


class StandInHub:
    """`repos`: {("model" or "dataset", "org/name"): folder}. Use as a context manager: serves on a free port."""

    def __init__(self, repos: dict):
        self.repos = {k: Path(v) for k, v in repos.items()}
        self.requests = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                hub.answer(self, body=True)

            def do_HEAD(self):
                hub.answer(self, body=False)

            def do_POST(self):
                hub.answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def commit(repo: str) -> str:
        return hashlib.sha1(repo.encode()).hexdigest()

    def entry(self, root: Path, f: Path) -> dict:
        rel = f.relative_to(root).as_posix()
        if f.is_dir():
            return {"type": "directory", "path": rel, "oid": hashlib.sha1(rel.encode()).hexdigest()}
        return {"type": "file", "path": rel, "size": f.stat().st_size, "oid": hashlib.sha1(f.read_bytes()).hexdigest()}

    def route(self, path: str):
        """(kind of request, repo kind, repo, rest of the path) for a known repository, else None."""
        for (kind, repo), _ in self.repos.items():
            api = f"/api/{kind}s/{repo}"
            if path == api or path.startswith(api + "/"):
                rest = path[len(api) :].strip("/").split("/", 2)  # ["revision"|"tree"|"paths-info", REV, PATH]
                return (rest[0] or "info"), kind, repo, rest
            resolve = f"{'/datasets' if kind == 'dataset' else ''}/{repo}/resolve/"
            if path.startswith(resolve):
                return "resolve", kind, repo, path[len(resolve) :].split("/", 1)
        return None

    def answer(self, h: BaseHTTPRequestHandler, body: bool):
        url = urlparse(h.path)
        path = unquote(url.path)
        self.requests.append(f"{h.command} {path}")
        found = self.route(path)
        if found is None:
            return self.send(h, 404, b"{}", body, {"X-Error-Code": "RepoNotFound"})
        what, kind, repo, rest = found
        root, commit = self.repos[(kind, repo)], self.commit(repo)
        files = sorted(p for p in root.rglob("*"))
        if what in ("info", "revision"):
            info = {
                "id": repo,
                "sha": commit,
                "private": False,
                "disabled": False,
                "gated": False,
                "siblings": [{"rfilename": p.relative_to(root).as_posix()} for p in files if p.is_file()],
            }
            return self.send(h, 200, json.dumps(info).encode(), body)
        if what == "tree":
            sub = root / (rest[2] if len(rest) > 2 else "")
            if not sub.is_dir():
                return self.send(h, 404, b"{}", body, {"X-Error-Code": "EntryNotFound"})
            recursive = parse_qs(url.query).get("recursive", ["false"])[0].lower() == "true"
            entries = [self.entry(root, p) for p in (sub.rglob("*") if recursive else sub.iterdir())]
            return self.send(h, 200, json.dumps(entries).encode(), body)
        if what == "paths-info":
            form = parse_qs(h.rfile.read(int(h.headers.get("Content-Length", 0))).decode())
            asked = [root / p for p in form.get("paths", [])]
            return self.send(h, 200, json.dumps([self.entry(root, p) for p in asked if p.exists()]).encode(), body)
        if what == "resolve" and len(rest) == 2 and (root / rest[1]).is_file():
            data = (root / rest[1]).read_bytes()
            etag = hashlib.sha256(data).hexdigest()
            return self.send(h, 200, data, body, {"X-Repo-Commit": commit, "ETag": f'"{etag}"'})
        return self.send(h, 404, b"{}", body, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit})

    @staticmethod
    def send(h, status: int, data: bytes, body: bool, headers: dict | None = None):
        h.send_response(status)
        for k, v in {"Content-Length": str(len(data)), "Content-Type": "application/json", **(headers or {})}.items():
            h.send_header(k, v)
        h.end_headers()
        if body:
            h.wfile.write(data)
