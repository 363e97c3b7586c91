"""The one exception type the workshop raises for bad input or an unfit machine.

Every message ends with a "To fix: ..." line, so that a learner who hits it in a notebook or a batch log
knows what to change. The command line prints the message alone (no traceback) and exits with status 2."""


class WorkshopError(RuntimeError):
    """Bad input, a missing file or model, or a machine that cannot run the asked experiment."""

    def __init__(self, problem: str, fix: str):
        self.problem, self.fix = problem, fix
        super().__init__(f"{problem}\nTo fix: {fix}")


def read_json_object(path, problem: str, fix: str) -> dict:
    """The JSON object in the file `path`.

    Raises:
        WorkshopError: "`path` `problem` (what is wrong with it)." and `fix`, when the file is not UTF-8 JSON,
            is nested too deeply to read, or holds something other than an object (cut short, edited by hand)."""
    # here, not at the top: `workshop --help` imports this module and needs neither (json: 3 ms of its 70)
    import json
    from pathlib import Path

    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(value, dict):
            raise ValueError(f"a JSON {type(value).__name__}, not an object")
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nested past Python's limit
        raise WorkshopError(f"{path} {problem} ({e}).", fix) from e
    return value
