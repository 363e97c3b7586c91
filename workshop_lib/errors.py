"""The one exception type the workshop raises for bad input or an unfit machine.

Every message ends with a "To fix: ..." line, so that a learner who hits it in a notebook or a batch log
knows what to change. The command line prints the message alone (no traceback) and exits with status 2.
"""


class WorkshopError(RuntimeError):
    """Bad input, a missing file or model, or a machine that cannot run the asked experiment."""

    def __init__(self, problem: str, fix: str):
        self.problem, self.fix = problem, fix
        super().__init__(f"{problem}\nTo fix: {fix}")
