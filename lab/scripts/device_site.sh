#!/usr/bin/env bash
# The device call behind site/executed/ on the GPU reference machine (issue 62; issue 61's notebooks executed on a
# GPU): installs the carried wheels (.whl/, and the notebook stack nbclient, ipykernel, jupytext, ipywidgets and
# their needs from .whl/nb, which the GPU image lacks: NOTES), builds the ops, then `make_site.py execute NOTEBOOKS`
# with random weights (no hub there) inside BUDGET seconds, and brings back the executed notebooks (small: their
# runs stay on the machine). As the device command, carrying .whl:
#   NOTEBOOKS="02_zero_stages" BUDGET=480 OPS=FusedAdamBuilder bash lab/scripts/device_site.sh   # OPS: those the notebooks need
source lab/scripts/device_env.sh  # the carried wheels installed, the call's environment
install_once /tmp/nb-packages .whl/nb/*.whl || exit 1
export PYTHONPATH=$PYTHONPATH:/tmp/nb-packages WORKSHOP_RANDOM_WEIGHTS=1 SITE_COMMIT=${SITE_COMMIT:?name the commit the tree is at}
t0=$SECONDS; timeout -k 5 200 python3 scripts/build_ops.py ${OPS:-FusedAdamBuilder CPUAdamBuilder}; echo "ops: $((SECONDS - t0)) s"
t0=$SECONDS
timeout -k 5 "${BUDGET:-480}" python3 scripts/make_site.py execute ${NOTEBOOKS:?name the notebooks} 2>&1 |
  grep -vE "it/s\]|s/it\]" | tail -60
echo "execute: $((SECONDS - t0)) s"
for nb in $NOTEBOOKS; do cp "site/executed/$nb.ipynb" "$OUT/" 2>/dev/null; done
ls -la "$OUT"
