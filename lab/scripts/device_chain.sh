#!/usr/bin/env bash
# Device work longer than one call (600 s): `start CMD` runs CMD, a bash command line of this folder's device
# scripts, in a process session of its own (setsid: the device keeps it running after the call while the machine
# stays held), with OUT=/tmp/chain/out and its output in /tmp/chain/log; `wait`, as the next calls (each made within
# the machine's 30 s of idle, or the machine goes back and CMD with it), follows the log for up to WAIT seconds and,
# once CMD has ended, brings back /tmp/chain/out (as out.tgz: `tar xzf out.tgz` here) and the log. Each call copies
# the working tree there again, undoing what CMD wrote into tracked files meanwhile (seen 2026-11-29: a
# notebook_times.json entry, reference runs put in workshop_lessons/ for a later step): CMD keeps what it makes in
# $OUT, never only in the tree. As device commands, carrying .whl:
#   bash lab/scripts/device_chain.sh start 'NOTEBOOKS=03e_zero3_or_fsdp2 BUDGET=1000 bash lab/scripts/device_site.sh'
#   WAIT=580 bash lab/scripts/device_chain.sh wait
chain=/tmp/chain
if [ "$1" = start ]; then
  [ -e $chain/pid ] && kill -0 "$(cat $chain/pid)" 2>/dev/null && { echo "a chain is running already"; exit 1; }
  rm -rf $chain && mkdir -p $chain/out
  OUT=$chain/out setsid bash -c "{ $2 ; } ; echo \"chain ended after \$SECONDS s, rc \$?\"; touch $chain/done" \
    >$chain/log 2>&1 </dev/null &
  echo $! >$chain/pid
fi
end=$((SECONDS + ${WAIT:-0}))
until [ -e $chain/done ] || [ $SECONDS -ge $end ]; do sleep 5; done
grep -vE "it/s\]|s/it\]|examples/s\]" $chain/log | tail -40
if [ -e $chain/done ]; then
  # one archive: a call brings back at most 8 files (16 MiB each; seen 2026-11-29: the ninth and later left out),
  # so CMD keeps only small files in $OUT (notebooks, results.json; never a run's model/)
  tar czf "$OUT/out.tgz" -C $chain/out . && gzip -c $chain/log >"$OUT/chain.log.gz" && tar tzvf "$OUT/out.tgz"
else
  echo "still running after $SECONDS s of this call"
fi
