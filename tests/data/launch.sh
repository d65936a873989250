#!/usr/bin/env bash
# A tiny launcher for tests/distributed.rs, as srun or torchrun start a
# run: `launch.sh slurm|torchrun N KEY CMD...` starts N copies of CMD at
# once, each with the variables that launcher sets for it (KEY: SLURM's
# job id, or torchrun's MASTER_PORT), prefixes each copy's output lines
# with `[i] `, waits for all of them, and exits 1 if any failed. Each copy
# runs under a 120 s limit, so a hang ends as a failure.
set -u
kind="$1" n="$2" key="$3"
shift 3
pids=()
for ((i = 0; i < n; i++)); do
  case "$kind" in
    slurm)
      vars=(SLURM_JOB_ID="$key" SLURM_PROCID="$i" SLURM_NTASKS="$n" SLURM_LOCALID="$i"
        SLURM_STEP_NODELIST="127.0.0.1" SLURM_JOB_NODELIST="127.0.0.1") ;;
    torchrun)
      vars=(MASTER_ADDR=127.0.0.1 MASTER_PORT="$key" RANK="$i" WORLD_SIZE="$n" LOCAL_RANK="$i") ;;
    *)
      echo "launch.sh: unknown launcher $kind" >&2
      exit 2 ;;
  esac
  (
    env "${vars[@]}" timeout -k 5 120 "$@" 2>&1 | sed -u "s/^/[$i] /"
    exit "${PIPESTATUS[0]}"
  ) &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
exit "$failed"
