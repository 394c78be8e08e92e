#!/bin/sh
# bench: apply the MGLRU wish carried on the kernel command line as bench.lru_gen=on|off.
# The kernel has no boot parameter for MGLRU, so `bench hosts reboot --lru-gen` puts this
# token on the next command line and this script, run early at boot by the unit that
# `bench hosts deploy` installs on rebootable hosts, writes lru_gen/enabled before any workload
# starts. The last token wins, as for kernel parameters. Paths can be overridden for tests.
cmdline=${BENCH_CMDLINE:-/proc/cmdline}
knob=${BENCH_LRU_GEN:-/sys/kernel/mm/lru_gen/enabled}
want=
for arg in $(cat "$cmdline"); do
    case "$arg" in
        bench.lru_gen=on) want=y ;;
        bench.lru_gen=off) want=n ;;
        bench.lru_gen=*) echo "bench-lru-gen: ignoring $arg (on or off)" >&2 ;;
    esac
done
[ -n "$want" ] || exit 0
if [ ! -w "$knob" ]; then
    echo "bench-lru-gen: $knob is missing: this kernel has no MGLRU" >&2
    exit 1
fi
echo "$want" > "$knob"
echo "bench-lru-gen: lru_gen/enabled=$(cat "$knob")"
