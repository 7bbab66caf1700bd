#!/bin/bash
# Hydra's "ssh" for the testbed (testbed.sh): `enter_node.sh [-x] ctb-nI COMMAND-STRING...`
# runs the command string (Hydra's proxy) in network namespace ctb-nI, in a UTS namespace of
# its own whose hostname is ctb-nI, so MPICH counts one host per emulated node.
set -euo pipefail
while [[ ${1:-} == -* ]]; do shift; done
node=${1:?enter_node.sh: no host given}
shift
[[ $node =~ ^ctb-n[0-9]+$ ]] || { echo "enter_node.sh: '$node' is not a testbed node" >&2; exit 1; }
# Like ssh, the remaining words form one shell command line (Hydra quotes the proxy path).
exec ip netns exec "$node" unshare --uts sh -c "hostname $node && exec $*"
