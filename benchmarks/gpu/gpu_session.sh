#!/usr/bin/env bash
# Issue 35's GPU figures as prepared device calls (a GPU loan is 15 minutes in all, start
# included; a call at most 10). Each step runs under its own timeout, so what finished still comes
# back, and writes NAME.log (and NAME.json) under OUT:
#   defaults    gpu_check.py's 403M shape at the shipped defaults against TRL's GRPOTrainer,
#               then the CUDA IPC weight sync (~5 minutes on one H200);
#   candidates  ours only, with what "auto" would turn on if it pays: use_remove_padding with
#               flex attention and the CUDA IPC sync (~2 minutes). Its learn-phase MFU against
#               the defaults step's TRL is the learner goal;
#   padding     speed/remove_padding.py on the embedded model, 128 rows of uneven length, bf16: padded
#               against unpadded, and the graphs flex attention compiled while timed (0 when a
#               new packed length does not recompile; ~2 minutes, most of it compiling).
#
#   benchmarks/gpu/gpu_session.sh OUT            # defaults, then candidates: one call, ~8 minutes
#   benchmarks/gpu/gpu_session.sh OUT padding    # a second call where the loan allows
#   ATTENTION=sdpa GPU_CHECK_ARGS=--small benchmarks/gpu/gpu_session.sh /tmp/out   # on a CPU
#
# It needs what gpu_check.py needs (the package with its bench extra: Ray, TRL) in $PYTHON
# (default python3).
#
# ATTENTION (default flex_attention) is the learner's attn_implementation in candidates and
# padding: a CPU runs no flex backward, hence sdpa there. GPU_CHECK_ARGS go to gpu_check.py.
set -u
out=${1:?usage: gpu_session.sh OUT_DIR [defaults] [candidates] [padding]}
shift
steps=${*:-defaults candidates}
mkdir -p "$out"
here=$(dirname "$0")
python=${PYTHON:-python3}
attention=${ATTENTION:-flex_attention}
read -ra check_args <<< "${GPU_CHECK_ARGS:-}"
# CUDA IPC needs a GPU: on a CPU (--small) the candidates keep the object-store sync.
ipc=$([[ " ${GPU_CHECK_ARGS:-} " == *" --small "* ]] && echo object_store || echo cuda_ipc)

step() {  # step NAME SECONDS COMMAND...: output to $out/NAME.log, then its exit status and tail
    local name=$1 seconds=$2
    shift 2
    echo "# $name ($(date -u +%H:%M:%S), at most $seconds s)"
    timeout "$seconds" "$@" > "$out/$name.log" 2>&1
    echo "# $name: exit $?"
    tail -n 45 "$out/$name.log"
}

if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
fi
for name in $steps; do
    case $name in
        defaults) step defaults 330 "$python" "$here/gpu_check.py" --parts shape \
            --json "$out/defaults.json" "${check_args[@]}" ;;
        candidates) step candidates 180 "$python" "$here/gpu_check.py" --parts shape --skip-trl \
            --ours-set use_remove_padding=true --ours-set "attn_implementation=\"$attention\"" \
            --ours-set "weight_sync_backend=\"$ipc\"" --json "$out/candidates.json" \
            "${check_args[@]}" ;;
        padding) step padding 240 "$python" "$here/../speed/remove_padding.py" --model embedded \
            --rows 128 --prompt 32 --response 96 --dtype bfloat16 --attention "$attention" \
            --updates 4 ;;
        *) echo "gpu_session.sh: unknown step $name (defaults, candidates, padding)"; exit 2 ;;
    esac
done
