"""Generated files, written or checked: the loop that scripts/make_course.py and scripts/make_slurm.py share."""

from pathlib import Path


def write_or_check(files: dict[Path, str], root: Path, check: bool, fix: str) -> int:
    """Write each path's text (printing the path, relative to `root`), or with `check` write nothing and name the
    files that are missing or differ, with the command that fixes them. Returns the exit code: 1 if any is stale."""
    stale = []
    for path, text in files.items():
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print(path.relative_to(root))
    if stale and len({path.parent for path in files}) > 1:  # files of several folders: each by its path
        stale = [str(path.relative_to(root)) for path, text in files.items() if path.read_text() != text]
        print(f"{', '.join(stale)} out of date. To fix: {fix}")
        return 1
    if stale:
        folder = next(iter(files)).parent.relative_to(root)
        where = "" if folder == Path(".") else f"{folder}/ is out of date for "
        print(f"{where}{', '.join(stale)}{'' if where else ' is out of date'}. To fix: {fix}")
        return 1
    return 0
