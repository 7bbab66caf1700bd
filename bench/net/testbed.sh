#!/bin/bash
# An emulated cluster on one machine: N "nodes" as network namespaces behind a shaped switch.
#
# Topology (every name starts with the project prefix "ctb-", so cleanup can find leftovers):
#
#   namespace ctb-sw : bridge br0 10.213.7.254/24 (the "switch"; mpiexec runs here)
#                      ports n0 .. n{N-1}, one veth end per node
#   namespace ctb-nI : eth0 10.213.7.(I+1)/24, the other end of veth nI, plus lo
#
# 10.213.7.0/24 exists only inside these namespaces: the host's own interfaces, routes and
# firewall are never touched, and all traffic goes to the namespaces' own addresses.
#
# Shaping: each node's link is shaped in both directions, on eth0 (node -> switch) and on the
# switch port nI (switch -> node): a tbf of RATE (burst 256kb, queue latency 50ms, as measured
# in NOTES), under a netem of DELAY (and LOSS) when the kernel has sch_netem.  A message
# between two nodes crosses two links, so its one-way delay is 2 x DELAY plus serialisation.
# Without sch_netem the delay and loss cannot be emulated: `up` says so (and refuses LOSS).
#
# Ranks: Hydra's ssh launcher is pointed at enter_node.sh, which runs each node's proxy in
# namespace ctb-nI with its own UTS hostname ctb-nI, so MPICH sees N hosts: ranks on one node
# use shared memory, ranks on different nodes use the OFI tcp provider over eth0 (shaped).
#
# Usage (root):
#   testbed.sh check                       exit 0 if the testbed can be built, else say why
#   testbed.sh up NODES RATE [DELAY [LOSS]] e.g. up 4 1gbit 50us 0
#   testbed.sh mpiexec NODES K CMD...      run CMD on NODES nodes x K ranks (mpiexec in ctb-sw)
#   testbed.sh list                        the ctb-* namespaces that exist
#   testbed.sh down                        remove every ctb-* namespace (idempotent)
set -euo pipefail

PREFIX=ctb
SUBNET=10.213.7
SWITCH_NS=$PREFIX-sw
HEAD_ADDR=$SUBNET.254
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MPIEXEC=${MPIEXEC:-mpiexec}
export PATH=$PATH:/usr/sbin:/sbin

die() { echo "testbed: $*" >&2; exit 1; }

# Print why the testbed cannot be built here and return 1, or return 0.
check() {
    [ "$(id -u)" = 0 ] || { echo "testbed: needs root (network namespaces and tc)"; return 1; }
    command -v ip >/dev/null || { echo "testbed: 'ip' (iproute2) not found"; return 1; }
    command -v tc >/dev/null || { echo "testbed: 'tc' (iproute2) not found"; return 1; }
    command -v unshare >/dev/null || { echo "testbed: 'unshare' (util-linux) not found"; return 1; }
    local probe=$PREFIX-probe$$ ok=0
    if ip netns add "$probe" 2>/dev/null; then
        ip -n "$probe" link add br0 type bridge 2>/dev/null &&
            ip netns exec "$probe" tc qdisc add dev br0 root tbf rate 1gbit burst 256kb latency 50ms \
                2>/dev/null && ok=1
        ip netns del "$probe"
    else
        echo "testbed: cannot create network namespaces"; return 1
    fi
    [ $ok = 1 ] || { echo "testbed: kernel lacks bridge or tbf support"; return 1; }
}

has_netem() {
    local probe=$PREFIX-probe$$ ok=1
    ip netns add "$probe"
    ip netns exec "$probe" tc qdisc add dev lo root netem delay 1us 2>/dev/null || ok=0
    ip netns del "$probe"
    [ $ok = 1 ]
}

# Shape egress of DEV in namespace NS: netem DELAY/LOSS (if any) over a tbf of RATE.
shape() {
    local ns=$1 dev=$2 rate=$3 delay=$4 loss=$5 netem=$6
    if [ "$netem" = 1 ]; then
        ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" loss "$loss%"
        ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: \
            tbf rate "$rate" burst 256kb latency 50ms
    else
        ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 50ms
    fi
}

up() {
    local nodes=$1 rate=$2 delay=${3:-50us} loss=${4:-0} netem=1 i
    [[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 200 ] ||
        die "NODES must be 1..200, got '$nodes'"
    [ -z "$(list)" ] || die "ctb-* namespaces exist already (another run?); 'make bench-net-clean' removes them"
    if ! has_netem; then
        netem=0
        [ "$loss" = 0 ] || die "loss $loss% requested but the kernel has no sch_netem"
        echo "testbed: WARNING: kernel has no sch_netem: delay $delay NOT emulated, rate only" >&2
    fi
    ip netns add "$SWITCH_NS"
    ip -n "$SWITCH_NS" link set lo up
    ip -n "$SWITCH_NS" link add br0 type bridge
    ip -n "$SWITCH_NS" addr add "$HEAD_ADDR/24" dev br0
    ip -n "$SWITCH_NS" link set br0 up
    for ((i = 0; i < nodes; i++)); do
        ip netns add "$PREFIX-n$i"
        ip -n "$PREFIX-n$i" link set lo up
        ip -n "$SWITCH_NS" link add "n$i" type veth peer name eth0 netns "$PREFIX-n$i"
        ip -n "$SWITCH_NS" link set "n$i" master br0 up
        ip -n "$PREFIX-n$i" addr add "$SUBNET.$((i + 1))/24" dev eth0
        ip -n "$PREFIX-n$i" link set eth0 up
        shape "$PREFIX-n$i" eth0 "$rate" "$delay" "$loss" "$netem"
        shape "$SWITCH_NS" "n$i" "$rate" "$delay" "$loss" "$netem"
    done
    echo "testbed: $nodes node(s) up, links $rate, delay $([ $netem = 1 ] && echo "$delay" || echo none), loss $loss%"
}

list() {
    ip netns list | awk '{print $1}' | grep "^$PREFIX-" || true
}

down() {
    local ns
    [ "$(id -u)" = 0 ] || { echo "testbed: not root, nothing removed"; return 0; }
    for ns in $(list); do
        ip netns del "$ns"
    done
}

# mpiexec NODES K CMD...: K ranks on each of nodes ctb-n0..ctb-n{NODES-1}.
run_mpiexec() {
    local nodes=$1 k=$2 i hosts=
    shift 2
    for ((i = 0; i < nodes; i++)); do hosts+="${hosts:+,}$PREFIX-n$i:$k"; done
    # FI_TCP_IFACE keeps the tcp provider on the shaped eth0 (every node names it so).
    ip netns exec "$SWITCH_NS" env FI_PROVIDER=tcp FI_TCP_IFACE=eth0 MPIR_CVAR_CH4_NETMOD=ofi \
        "$MPIEXEC" -launcher ssh -launcher-exec "$HERE/enter_node.sh" -localhost "$HEAD_ADDR" \
        -hosts "$hosts" -n $((nodes * k)) "$@"
}

case ${1:-} in
    check) check ;;
    up) shift; up "$@" ;;
    list) list ;;
    down) down ;;
    mpiexec) shift; run_mpiexec "$@" ;;
    *) die "usage: testbed.sh check | up NODES RATE [DELAY [LOSS]] | mpiexec NODES K CMD... | list | down" ;;
esac
