#!/bin/sh
# Run a command that downloads from the package index, again after a failure.
#
#   tools/retry.sh COMMAND...
#
# A download cut off mid-way fails pip with a hash mismatch, which pip itself never retries; the
# same command a moment later succeeds.  COMMAND runs up to $RETRIES times (default 3), $RETRY_WAIT
# seconds apart (default 10); the exit status is the last try's.
tries=${RETRIES:-3}
wait=${RETRY_WAIT:-10}
n=1
while :; do
    "$@" && exit 0
    status=$?
    [ "$n" -ge "$tries" ] && exit $status
    echo "retry.sh: '$1 ...' failed (exit status $status), try $((n + 1)) of $tries in ${wait}s" >&2
    sleep "$wait"
    n=$((n + 1))
done
