"""A Jupyter server extension for the course: a course notebook's `language_info.version` is replaced, as JupyterLab
reads the notebook, by the version of the Python that serves it, which is the kernel's where the kernel runs in the
server's environment (the workshop's .venv). JupyterLab writes the kernel's language_info into a notebook when the
kernel starts and marks the notebook modified if it differs; without this, every course notebook would open
modified wherever the Python is not the one its header names (make_course.py's). Nothing is written: a file
changes only when the learner saves it.

Only the course's notebooks (a code cell that imports workshop_lib or workshop_lessons) are touched, and only a
language_info that is a Python one; any other notebook, or a metadata of another shape, is served as the server alone
serves it. "Trust Notebook" signs the notebook as JupyterLab shows it (this version in): a notebook is trusted if
its signature matches as read from disk or as shown. Imports nothing of the workshop (no torch): the server starts
as fast without it.

Enabled in the environment the workshop is installed in by jupyter_config/workshop_course.json, in
PREFIX/etc/jupyter/jupyter_server_config.d/ (scripts/setup.sh puts it there; a wheel's install too). It wraps the
contents manager the server ends with (jupytext's, whose extension loads before this one: alphabetical order)."""

import platform
import re

from jupyter_core.utils import ensure_async

COURSE = re.compile(r"^\s*(from|import) workshop_(lib|lessons)\b", re.M)  # a code cell of a course notebook


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    manager = serverapp.contents_manager
    get = manager.get

    async def get_with_this_python(path, content=True, type=None, format=None, **kwargs):
        model = await ensure_async(get(path, content=content, type=type, format=format, **kwargs))
        nb = model["content"] if content and model["type"] == "notebook" else {}
        info = nb.get("metadata", {}).get("language_info")
        code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
        if isinstance(info, dict) and info.get("name") == "python" and "version" in info:
            if COURSE.search("".join(str(c.get("source", "")) for c in code)):
                info["version"] = platform.python_version()
                # not signed as read from disk: signed as shown, by "Trust Notebook" or a save? (without the marks)
                if not any(c.get("metadata", {}).pop("trusted", False) for c in code):
                    manager.mark_trusted_cells(nb, path)
        return model

    manager.get = get_with_this_python
    serverapp.log.info(
        "workshop_lessons.jupyter: course notebooks read with this Python's language_info version "
        f"({platform.python_version()})"
    )
