"""Units and the one rounding shared by every module: sizes are reported in MiB (2**20 bytes) throughout the workshop (results.json's
*_mib fields, memory.csv, the fit and estimate tables), as NVML, PyTorch's memory summary and DeepSpeed's
estimators count them. Every module converts with this constant; none defines its own."""

MiB = 2**20  # bytes


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up, in integers (micro-batches of a data set, steps of a run, rows of a grid)."""
    return -(-a // b)
