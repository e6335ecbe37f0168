#!/usr/bin/env bash
# Issue 50's GPU figures as prepared device calls (a GPU loan is 15 minutes in all, the machine's
# start included; a call at most 10). Each step runs under its own timeout, so what finished still
# comes back, and writes NAME.log (and NAME.json) under OUT:
#   defaults    gpu_check.py's 403M shape at the shipped defaults against TRL's GRPOTrainer: ours
#               with one more update under torch.profiler after the measured ones (the learn
#               phase by pass, kernels, launches, host gaps, top kernels, MFU), TRL's, then ours
#               again with the CUDA IPC weight sync (3 updates) and on the asynchronous path
#               (max_staleness=1, 5 updates: s/update against the synchronous run's and TRL's).
#               Each saved to defaults.json when it ends (~6 minutes on one H200, estimated: the
#               shape without the profile and the async run took ~4);
#   candidates  ours only, with what "auto" would turn on if it pays: use_remove_padding with
#               flex attention and the CUDA IPC sync (~2 minutes). Its learn-phase MFU against
#               the defaults step's TRL is the learner goal;
#   padding     speed/remove_padding.py on the embedded model, 128 rows of uneven length, bf16: padded
#               against unpadded, and the graphs flex attention compiled while timed (0 when a
#               new packed length does not recompile; ~2 minutes, most of it compiling);
#   large       the 1.5B shape (Qwen2.5-1.5B's config, random weights) at 32 x 8 x 512 against TRL
#               (micro-batches of 32 rows), 3 updates a side, peak memory; no extra runs
#               (estimated ~5 minutes: writing 3 GB of weights, each side's load, TRL's
#               model.generate of 256 x 512 tokens per update; never yet run on a GPU).
#   fsdp2       issue 49's GPU check: ours only on the 403M shape with learner_strategy='fsdp2'
#               (one remote learner at half the GPU, a mesh of one: NCCL, sharded Adam, the
#               shards' weight sync), its phase table beside the defaults step's (~2 minutes,
#               estimated; on the CPU --small: 47 s).
#
#   benchmarks/gpu/gpu_session.sh OUT            # defaults, then candidates: one call, ~8 minutes
#   benchmarks/gpu/gpu_session.sh OUT padding    # a second call where the loan allows
#   benchmarks/gpu/gpu_session.sh OUT large      # a call of its own: ~5 minutes
#   ATTENTION=sdpa GPU_CHECK_ARGS=--small benchmarks/gpu/gpu_session.sh /tmp/out   # on a CPU
#
# With a 15-minute loan (the machine's start takes 1-2 of them, setup.sh about 20 s), in order:
#   1. run, carry [".gpu"], timeout_s 600:
#        source .gpu/setup.sh && bash benchmarks/gpu/gpu_session.sh "$OUT"
#      (defaults, then candidates: at most 400 + 170 s, ~8 minutes expected);
#   2. at once, while the machine is warm, if status says >= 4 minutes are left, timeout_s 300:
#        source .gpu/setup.sh && bash benchmarks/gpu/gpu_session.sh "$OUT" padding
#      (or large instead where >= 9 minutes are left: the first call ran short); then give_back.
#   The next loan: large first (timeout_s 600), then padding and fsdp2 if they have not run
#   (one call: "$OUT" padding fsdp2, timeout_s 450).
#
# It needs what gpu_check.py needs (the package with its bench extra: Ray, TRL) in $PYTHON
# (default python3).
#
# ATTENTION (default flex_attention) is the learner's attn_implementation in candidates and
# padding: a CPU runs no flex backward, hence sdpa there. GPU_CHECK_ARGS go to gpu_check.py.
set -u
out=${1:?usage: gpu_session.sh OUT_DIR [defaults] [candidates] [padding] [large] [fsdp2]}
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
        defaults) step defaults 400 "$python" "$here/gpu_check.py" --parts shape \
            --runs cuda_ipc async --profile --json "$out/defaults.json" "${check_args[@]}" ;;
        candidates) step candidates 170 "$python" "$here/gpu_check.py" --parts shape --skip-trl \
            --ours-set use_remove_padding=true --ours-set "attn_implementation=\"$attention\"" \
            --ours-set "weight_sync_backend=\"$ipc\"" --json "$out/candidates.json" \
            "${check_args[@]}" ;;
        padding) step padding 240 "$python" "$here/../speed/remove_padding.py" --model embedded \
            --rows 128 --prompt 32 --response 96 --dtype bfloat16 --attention "$attention" \
            --updates 4 ;;
        large) step large 540 "$python" "$here/gpu_check.py" --parts shape --shape 1.5b --runs \
            --json "$out/large.json" "${check_args[@]}" ;;
        fsdp2) step fsdp2 200 "$python" "$here/gpu_check.py" --parts shape --skip-trl \
            --ours-set 'learner_strategy="fsdp2"' --json "$out/fsdp2.json" "${check_args[@]}" ;;
        *) echo "gpu_session.sh: unknown step $name (defaults, candidates, padding, large, fsdp2)"
           exit 2 ;;
    esac
done
