"""Generated files, written or checked: the loop that scripts/make_course.py and scripts/make_slurm.py share."""

from pathlib import Path

from workshop_lib.rundir import atomic_path


def _current(path: Path, text: str) -> bool:
    """Whether `path` is a file (not a link) holding `text`; a folder, a link or a file that is no UTF-8 is not."""
    try:
        return path.is_file() and not path.is_symlink() and path.read_text() == text
    except (OSError, UnicodeDecodeError):
        return False


def write_or_check(files: dict[Path, str], root: Path, check: bool, fix: str) -> int:
    """Write each path's text (printing the path, relative to `root`; a missing folder is created, a link at a path is
    replaced by the file, never written through), or with `check` write nothing and name the files that are missing or
    differ, with the command that fixes them. Returns the exit code: 1 if any is stale, 2 if a folder stands where a
    file goes (nothing written)."""
    folders = [str(p.relative_to(root)) for p in files if p.is_dir() and not p.is_symlink()]
    if folders and not check:
        print(
            f"{', '.join(folders)}: a folder where a generated file goes; nothing was written. To fix: move it, then {fix}"
        )
        return 2
    stale = [path.name for path, text in files.items() if not _current(path, text)]
    if not check:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                tmp.write_text(text)
            print(path.relative_to(root))
    elif stale and len({path.parent for path in files}) > 1:  # files of several folders: each by its path
        stale = [str(path.relative_to(root)) for path, text in files.items() if not _current(path, text)]
        print(f"{', '.join(stale)} out of date. To fix: {fix}")
        return 1
    elif stale:
        folder = next(iter(files)).parent.relative_to(root)
        where = "" if folder == Path(".") else f"{folder}/ is out of date for "
        print(f"{where}{', '.join(stale)}{'' if where else ' is out of date'}. To fix: {fix}")
        return 1
    return 0
