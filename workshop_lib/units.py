"""Units shared by every module: sizes are reported in MiB (2**20 bytes) throughout the workshop (results.json's
*_mib fields, memory.csv, the fit and estimate tables), as NVML, PyTorch's memory summary and DeepSpeed's
estimators count them. Every module converts with this constant; none defines its own."""

MiB = 2**20  # bytes
