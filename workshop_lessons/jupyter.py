"""A Jupyter server extension for the course: a notebook's `language_info.version` is replaced, as JupyterLab reads
the notebook, by the version of the Python that serves it, which is the kernel's where the kernel runs in the
server's environment (the workshop's .venv). JupyterLab writes the kernel's language_info into a notebook when the
kernel starts and marks the notebook modified if it differs; without this, every course notebook would open
modified wherever the Python is not the one its header names (make_course.py's). Nothing is written: a file
changes only when the learner saves it.

Enabled in the environment the workshop is installed in by jupyter_config/workshop_course.json, in
PREFIX/etc/jupyter/jupyter_server_config.d/ (scripts/setup.sh puts it there; a wheel's install too). It wraps the
contents manager the server ends with (jupytext's, whose extension loads before this one: alphabetical order)."""

import platform

from jupyter_core.utils import ensure_async


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    manager = serverapp.contents_manager
    get = manager.get

    async def get_with_this_python(path, content=True, type=None, format=None, **kwargs):
        model = await ensure_async(get(path, content=content, type=type, format=format, **kwargs))
        if content and model["type"] == "notebook":
            info = model["content"].get("metadata", {}).get("language_info", {})
            if info.get("name") == "python" and "version" in info:
                info["version"] = platform.python_version()
        return model

    manager.get = get_with_this_python
    serverapp.log.info(
        "workshop_lessons.jupyter: notebooks read with this Python's language_info version "
        f"({platform.python_version()})"
    )
